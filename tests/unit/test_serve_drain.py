"""`drain_run`, serve's loop from a run to its event stream: a failure outside
the engine ends the stream with Dify's 500 event in our words, and what the
exception said goes to the log only."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from firstgate.runtime.execution.events import RunInfo
from firstgate.serve.runs import EventStream, drain_run


class _BrokenRun:
    def __init__(self) -> None:
        self.run_id = "run-1"
        self.info = RunInfo(
            task_id="task-1", workflow_run_id="run-1", workflow_id="wf", app_id="app",
            mode="workflow", user_id="u", created_at=0,
        )  # fmt: skip
        # No store: nothing is recorded, so no timeline is kept either.
        self.session = SimpleNamespace(store=None, options=SimpleNamespace(recorded=True))

    def __iter__(self) -> Iterator[Any]:
        raise UnicodeEncodeError("utf-8", "secret \udfff", 7, 8, "surrogates not allowed")


def test_a_failure_outside_the_engine_is_our_500_and_its_words_go_to_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stream = EventStream()
    ended: list[bool] = []
    with caplog.at_level(logging.ERROR, "firstgate.serve"):
        drain_run(_BrokenRun(), stream, lambda: ended.append(True))  # type: ignore[arg-type]
    events, done = stream.read(0, 0)
    assert done and ended == [True]
    (event,) = [json.loads(e) for e in events]
    assert event["event"] == "error" and event["status"] == 500
    assert event["code"] == "internal_server_error" and event["workflow_run_id"] == "run-1"
    assert event["message"] == "the server could not handle this request; its log says why"
    assert "surrogates" in caplog.text and "secret" not in event["message"]
