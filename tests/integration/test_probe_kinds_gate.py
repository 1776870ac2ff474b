"""The probes of SGLang, TGI, llama-swap and Ollama in whole workflows: the
route's `probe` (from the settings file) is asked when the first-token budget
expires; busy extends the wait on the same connection (`node_waiting`), idle
fails at the first window, no signal behaves as without a probe.

Real sockets: one fake serves the chat stream and the status endpoint on one
origin, answering as the server of that kind does."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from firstgate.runtime.execution import events as ev

from tests.fakes import llm_server as fake
from tests.fakes import probe_server as ps
from tests.integration.test_workflow_fallback import flow_doc, of, run_yaml
from tests.run_events import final

CHAT = "/v1/chat/completions"
WINDOW = 0.4


@pytest.fixture(autouse=True)
def _no_budget_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRSTGATE_FIRST_TOKEN_TIMEOUT_S", raising=False)
    monkeypatch.delenv("FIRSTGATE_FIRST_TOKEN_CEILING_S", raising=False)


def server(kind: str, behaviour: ps.Behaviour, chat: fake.Scenario) -> ps.ProbeServer:
    if kind in ("sglang", "tgi"):
        return ps.ProbeServer(metrics=behaviour, metrics_flavor=kind, chat=chat)  # type: ignore[arg-type]
    if kind == "llama-swap":
        return ps.ProbeServer(running=behaviour, metrics_flavor="llama-swap", chat=chat)
    return ps.ProbeServer(ps=behaviour, chat=chat)


def models(srv: ps.ProbeServer, probe: str) -> dict[str, Any]:
    route = {
        "kind": "openai-compatible",
        "base_url": srv.base_url,
        "first_token_timeout_s": WINDOW,
        "probe": probe,
        "probe_timeout_s": 1,
    }
    return {"providers": {"primary": route}}


@pytest.mark.parametrize("kind", ["sglang", "tgi", "llama-swap", "ollama", "auto"])
def test_a_busy_verdict_extends_the_wait_and_the_same_request_answers(
    tmp_path: Path, kind: str
) -> None:
    chat = fake.pings(0.1, 1.5, then_tokens=["finally"])
    served = "sglang" if kind == "auto" else kind
    with server(served, ps.always_busy(), chat) as srv:
        started = time.monotonic()
        events = run_yaml(tmp_path, flow_doc(), models(srv, kind))
        took = time.monotonic() - started
        assert srv.count(CHAT) == 1  # the same request kept going
    waits = of(events, ev.NodeWaiting)
    assert len(waits) >= 2, kind
    assert waits[0].node_id == "llm" and waits[0].target == "primary"
    assert waits[0].message_key == "watchdog.waiting"
    assert WINDOW <= waits[0].wait_elapsed < 3 * WINDOW
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {"answer": "finally"}
    assert 1.5 <= took < 5.0


@pytest.mark.parametrize("kind", ["sglang", "tgi"])
def test_an_idle_verdict_fails_at_the_first_window(tmp_path: Path, kind: str) -> None:
    with server(kind, ps.always_idle(), fake.pings(0.1, 10)) as srv:
        started = time.monotonic()
        events = run_yaml(tmp_path, flow_doc(), models(srv, kind))
        took = time.monotonic() - started
        assert srv.probe_requests(), "the probe was asked"
    assert not of(events, ev.NodeWaiting)
    (handled,) = of(events, ev.NodeException)
    assert handled.error_type == "FirstTokenTimeoutError"
    assert WINDOW <= took < 2.5


@pytest.mark.parametrize(
    ("kind", "behaviour"),
    [
        ("llama-swap", ps.always_idle()),  # nothing listed
        ("ollama", ps.always_idle()),  # resident, expiry fixed
        ("ollama", ps.empty_ps()),
    ],
    ids=["llama-swap-empty", "ollama-resident", "ollama-empty"],
)
def test_where_the_probe_cannot_tell_the_budget_fires_as_without_one(
    tmp_path: Path, kind: str, behaviour: ps.Behaviour
) -> None:
    with server(kind, behaviour, fake.pings(0.1, 10)) as srv:
        started = time.monotonic()
        events = run_yaml(tmp_path, flow_doc(), models(srv, kind))
        took = time.monotonic() - started
        assert srv.probe_requests(), "the probe was asked"
    assert not of(events, ev.NodeWaiting)
    (handled,) = of(events, ev.NodeException)
    assert handled.error_type == "FirstTokenTimeoutError"
    assert WINDOW <= took < 2.5
