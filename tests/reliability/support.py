"""Shared helpers for the reliability suite: flows, routes, leak and secret checks."""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
import time
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute

# Recognisable credentials, planted through the models file's api_key_env.
OPENAI_KEY_ENV = "FIRSTGATE_RELIABILITY_OPENAI_KEY"
DAEMON_KEY_ENV = "FIRSTGATE_RELIABILITY_DAEMON_KEY"
OPENAI_SECRET = "sk-CANARY-openai-5e1f0c9a7b"
DAEMON_SECRET = "pd-CANARY-daemon-3d8b42e6f1"
SECRETS = (OPENAI_SECRET, DAEMON_SECRET)
# Distinctive fragments, so that a partly redacted key is caught too.
SECRET_FRAGMENTS = ("CANARY-openai-5e1f", "CANARY-daemon-3d8b", "5e1f0c9a7b", "3d8b42e6f1")


def plant_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OPENAI_KEY_ENV, OPENAI_SECRET)
    monkeypatch.setenv(DAEMON_KEY_ENV, DAEMON_SECRET)


def routes(base_root: str) -> RuntimeSettings:
    """`oa` speaks OpenAI-compatible, `pd` the Dify plugin daemon; both carry a key."""
    return RuntimeSettings(
        providers={
            # No liveness probe: the hostile server would answer GET /slots with a
            # hostile scenario too, and a stalled probe legitimately delays the
            # first-token error by up to the probe timeout (tested in
            # tests/integration/test_watchdog.py); here deadlines must fire on time.
            "oa": ProviderRoute(
                kind="openai-compatible",
                base_url=f"{base_root}/v1",
                api_key_env=OPENAI_KEY_ENV,
                probe="off",
            ),
            "pd": ProviderRoute(
                kind="plugin-daemon",
                base_url=base_root,
                api_key_env=DAEMON_KEY_ENV,
                tenant_id="tenant-1",
                plugin_id="langgenius/fake",
            ),
        }
    )


def llm_flow(
    provider: str,
    *,
    first_token_ms: int,
    idle_ms: int,
    total_ms: int,
    retries: int = 1,
    retry_interval_ms: int = 10,
    strategy: str | None = "fail-branch",
) -> dict[str, Any]:
    """start -> llm -(success)-> pick -> end; llm -(fail-branch)-> apology -> pick."""
    llm: dict[str, Any] = {
        "type": "llm",
        "title": "LLM",
        "model": {"provider": provider, "name": "m", "mode": "chat", "completion_params": {}},
        "prompt_template": [{"role": "user", "text": "{{#start.tag#}}"}],
        "invocation": {
            "first_token_timeout_ms": first_token_ms,
            "idle_timeout_ms": idle_ms,
            "stream_total_timeout_ms": total_ms,
        },
        "retry_config": {
            "retry_enabled": retries > 0,
            "max_retries": retries,
            "retry_interval": retry_interval_ms,
        },
    }
    if strategy:
        llm["error_strategy"] = strategy
    nodes = [
        {
            "id": "start",
            "data": {
                "type": "start",
                "title": "Start",
                "variables": [{"variable": "tag", "label": "tag", "type": "text-input"}],
            },
        },
        {"id": "llm", "data": llm},
        {
            "id": "apology",
            "data": {
                "type": "template-transform",
                "title": "Apology",
                "template": "failed: {{ kind }}",
                "variables": [{"variable": "kind", "value_selector": ["llm", "error_type"]}],
            },
        },
        {
            "id": "pick",
            "data": {
                "type": "variable-aggregator",
                "title": "Pick",
                "variables": [["llm", "text"], ["apology", "output"]],
            },
        },
        {
            "id": "end",
            "data": {
                "type": "end",
                "title": "End",
                "outputs": [{"variable": "answer", "value_selector": ["pick", "output"]}],
            },
        },
    ]
    edges = [
        {"source": "start", "target": "llm"},
        {"source": "llm", "target": "pick", "sourceHandle": "source"},
        {"source": "llm", "target": "apology", "sourceHandle": "fail-branch"},
        {"source": "apology", "target": "pick"},
        {"source": "pick", "target": "end"},
    ]
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "reliability", "mode": "workflow"},
        "workflow": {"graph": {"nodes": nodes, "edges": edges}},
    }


# --- checking what a run produced ----------------------------------------------

NODE_TERMINALS = (ev.NodeFinished,)
# What may follow `workflow_finished`: a chat turn's end.
AFTER_TERMINAL = (ev.MessageEnd, ev.ErrorEvent)


def check_run_shape(events: list[ev.Event]) -> None:
    """One terminal event, last (but for a chat turn's end); every started node ends once."""
    assert events, "a run yields events"
    assert isinstance(events[0], ev.WorkflowStarted)
    terminals = [e for e in events if isinstance(e, ev.WorkflowFinished)]
    tail = events[events.index(terminals[0]) + 1 :] if terminals else []
    assert len(terminals) == 1 and all(isinstance(e, AFTER_TERMINAL) for e in tail), [
        type(e).__name__ for e in events
    ]
    started = [e.node_id for e in events if isinstance(e, ev.NodeStarted)]
    assert len(started) == len(set(started)), "a node starts at most once per run"
    for node_id in started:
        ends = [e for e in events if isinstance(e, NODE_TERMINALS) and e.node_id == node_id]
        assert len(ends) == 1, (node_id, [type(e).__name__ for e in ends])


def errors_of(events: Iterable[ev.Event]) -> Iterator[BaseException]:
    for event in events:
        error = getattr(event, "error", None)
        if isinstance(error, BaseException):
            yield error


def exception_texts(error: BaseException) -> Iterator[str]:
    """str/repr/traceback of an exception and everything chained to it."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [error]
    while todo:
        exc = todo.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        yield str(exc)
        yield repr(exc)
        yield repr(getattr(exc, "args", ()))
        yield repr(getattr(exc, "__dict__", {}))
        yield "".join(traceback.format_exception(exc))
        todo.extend([exc.__cause__, exc.__context__])


def assert_no_secret(texts: Iterable[str], where: str) -> None:
    for text in texts:
        for needle in (*SECRETS, *SECRET_FRAGMENTS):
            assert needle not in text, f"credential leaked into {where}: {text[:300]!r}"


def assert_events_clean(events: list[ev.Event]) -> None:
    texts = [repr(e) for e in events]
    texts += [json.dumps(e.to_dict(), default=repr) for e in events]
    assert_no_secret(texts, "an event")
    for error in errors_of(events):
        assert_no_secret(exception_texts(error), f"an exception ({type(error).__name__})")


class CapturingHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self._formatter.format(record))
            self.lines.append(repr(record.args))
        except Exception:  # noqa: BLE001 - a log record that cannot format is still data
            self.lines.append(repr(record.__dict__))


@contextmanager
def capture_all_logs() -> Iterator[CapturingHandler]:
    """Every log record of every logger, at DEBUG, for the duration."""
    handler = CapturingHandler()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


# --- leaks ---------------------------------------------------------------------


@dataclass(frozen=True)
class ResourceCount:
    fds: int
    sockets: int
    threads: int
    greenlets: int

    @classmethod
    def now(cls) -> ResourceCount:
        fds = sockets = 0
        for name in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{name}")
            except OSError:
                continue
            fds += 1
            sockets += target.startswith("socket:")
        return cls(fds, sockets, threading.active_count(), _greenlets())


def _greenlets() -> int:
    try:
        import greenlet
    except ImportError:
        return 0
    return sum(1 for obj in gc.get_objects() if isinstance(obj, greenlet.greenlet) and obj)


def assert_settles_to(before: ResourceCount, *, timeout: float = 5.0) -> ResourceCount:
    """Wait for everything started since `before` to be released."""
    give_up = time.monotonic() + timeout
    while True:
        gc.collect()
        now = ResourceCount.now()
        if (
            now.fds <= before.fds
            and now.sockets <= before.sockets
            and now.threads <= before.threads
            and now.greenlets <= before.greenlets
        ):
            return now
        if time.monotonic() > give_up:
            raise AssertionError(f"resources leaked: before={before}, after={now}")
        time.sleep(0.05)
