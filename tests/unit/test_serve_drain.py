"""`drain_run`, serve's loop from a run to its event stream: a failure outside
the engine ends the stream with Dify's 500 event in our words, and what the
exception said goes to the log only; a real run's timeline is in the store
before its last event goes out. When the last run in flight ends, the idle
garbage collection comes a moment later, not before that stream's last bytes."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from firstgate.runtime.execution.events import RunInfo
from firstgate.runtime.execution.resources import RunResources
from firstgate.runtime.execution.session import RunOptions
from firstgate.runtime.workflow import load_workflow
from firstgate.serve.runs import EventStream, drain_run
from firstgate.store import open_store
from firstgate.store.base import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "workflows"


class _BrokenRun:
    def __init__(self) -> None:
        self.run_id = "run-1"
        self.info = RunInfo(
            task_id="task-1", workflow_run_id="run-1", workflow_id="wf", app_id="app",
            mode="workflow", user_id="u", created_at=0,
        )  # fmt: skip
        # No store: nothing is recorded, so no timeline is kept either.
        self.session = SimpleNamespace(store=None)

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


class _Watching(EventStream):
    """A stream that notes, for each event, whether the store had the run's timeline."""

    def __init__(self, store: Store, run_id: str) -> None:
        super().__init__()
        self.kept_when: list[tuple[str, bool]] = []
        self._store, self._run_id = store, run_id

    def publish(self, event: dict[str, Any]) -> None:
        self.kept_when.append((event["event"], self._store.timeline(self._run_id) is not None))
        super().publish(event)


def test_the_timeline_is_kept_before_the_last_event_goes_out(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "state.db"))
    workflow = load_workflow(FIXTURES / "template_salute.yml")
    try:
        with RunResources.open(store=store) as resources:
            run = workflow.run({"who": "Ada"}, RunOptions(), resources)
            stream = _Watching(store, run.run_id)
            drain_run(run, stream, lambda: None)
        # A reader that asks for the timeline on the last event finds it.
        assert stream.kept_when[-1] == ("workflow_finished", True)
        assert not stream.kept_when[0][1]
        kept = store.timeline(run.run_id) or []
        assert [e["event"] for e in kept][-1] == "workflow_finished"
    finally:
        store.close()


def _ended_alone(manager: Any) -> None:
    """One run in flight ends (its stream ended): the server falls idle."""
    from firstgate.serve.runs import RunHandle

    stream = EventStream()
    stream.end()
    handle = RunHandle(
        task_id="t", workflow_run_id="r", app_stem="a", app_id="app", user="u", chat=False,
        stream=stream, stop=lambda reason: None,
    )  # fmt: skip
    manager._active = 1
    manager._ended(handle, _BrokenRun().info)


def test_the_idle_collection_waits_for_the_last_bytes_of_the_stream_that_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Collected at once, the full pass held back what the ended stream's writer
    still had to send (a stop's `workflow_finished`); a run started meanwhile
    means the server is not idle after all: no pass."""
    import time

    from firstgate.serve import runs

    collected: list[float] = []
    monkeypatch.setattr(runs.gc, "collect", lambda *a: collected.append(time.monotonic()))
    manager = runs.RunManager(SimpleNamespace())  # type: ignore[arg-type]
    started = time.monotonic()
    _ended_alone(manager)
    assert collected == []  # not in the ended run's own thread, before its writer
    give_up = time.monotonic() + 5
    while not collected and time.monotonic() < give_up:
        time.sleep(0.01)
    assert len(collected) == 1 and collected[0] - started >= runs.IDLE_COLLECT_S
    collected.clear()
    _ended_alone(manager)
    time.sleep(runs.IDLE_COLLECT_S / 2)  # the collector waits out the quiet moment
    with manager._lock:
        manager._active += 1  # the next run started before the pass was due
    time.sleep(runs.IDLE_COLLECT_S * 4)
    assert collected == []


def test_a_stop_right_after_the_pause_waits_for_the_engine_to_let_the_run_go() -> None:
    """`workflow_paused` is out, the engine still cleaning up: a stop then went to
    the engine, which no longer ran the run, and was lost (the run stayed paused).
    It waits for `_ended`, and the run is ended where it waits."""
    import threading
    import time

    from firstgate.serve import runs
    from firstgate.serve.runs import RunHandle

    ended_paused: list[str] = []
    aborted: list[str] = []
    manager = runs.RunManager(
        SimpleNamespace(store=None),  # type: ignore[arg-type]
        end_paused=lambda store, sink, info, reason: ended_paused.append(reason),
    )
    stream = EventStream()
    stream.publish({"event": "workflow_paused", "data": {}})
    info = _BrokenRun().info
    handle = RunHandle(
        task_id=info.task_id, workflow_run_id="r", app_stem="a", app_id="app", user="u",
        chat=False, stream=stream, stop=aborted.append,
    )  # fmt: skip
    with manager._lock:
        manager._register(handle)
        manager._active = 1
    app = SimpleNamespace(workflow=SimpleNamespace(app_id="app"))
    stopper = threading.Thread(
        target=manager.stop, args=("task-1",), kwargs={"app": app, "user": "u", "reason": "stop"}
    )
    stopper.start()
    time.sleep(0.1)  # the engine lets go a moment later
    manager._ended(handle, info)
    stopper.join(5)
    assert ended_paused == ["stop"] and aborted == []
