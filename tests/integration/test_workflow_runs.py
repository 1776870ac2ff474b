"""Whole workflows against the raw-socket fake model server: retries, error
strategies, timeouts, parallel branches, abort and limits."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from firstgate.runtime import RunLimits, RunOptions, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute

from tests.fakes import llm_server as fake
from tests.run_events import final


def llm_node(node_id: str, **extra: Any) -> dict[str, Any]:
    data = {
        "type": "llm",
        "title": f"LLM {node_id}",
        "model": {
            "provider": "fake",
            "name": "m",
            "mode": "chat",
            "completion_params": {"max_tokens": 16},
        },
        "prompt_template": [{"role": "user", "text": "{{#sys.query#}}"}],
    }
    data.update(extra)
    return {"id": node_id, "data": data}


def node(node_id: str, node_type: str, **data: Any) -> dict[str, Any]:
    return {"id": node_id, "data": {"type": node_type, "title": node_id, **data}}


def edge(source: str, target: str, handle: str = "source") -> dict[str, Any]:
    return {"source": source, "target": target, "sourceHandle": handle}


def flow(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "t", "mode": "advanced-chat"},
        "workflow": {"graph": {"nodes": [node("start", "start"), *nodes], "edges": edges}},
    }


def routes(server: fake.FakeLLMServer) -> RuntimeSettings:
    route = ProviderRoute(kind="openai-compatible", base_url=server.base_url)
    return RuntimeSettings(providers={"fake": route})


def run_all(document: dict[str, Any], server: fake.FakeLLMServer, **kwargs: Any) -> list[ev.Event]:
    workflow = load_workflow(document)
    return list(workflow.run({"query": "hi"}, RunOptions(**kwargs), settings=routes(server)))


def of(events: list[ev.Event], kind: type[ev.Event], node_id: str | None = None) -> list[Any]:
    return [
        e
        for e in events
        if isinstance(e, kind) and (node_id is None or getattr(e, "node_id", None) == node_id)
    ]


RETRY = {"retry_enabled": True, "max_retries": 2, "retry_interval": 100}


def test_retry_then_success_keeps_only_the_successful_attempts_text() -> None:
    doc = flow(
        [
            llm_node("llm", retry_config=RETRY, invocation={"idle_timeout_ms": 300}),
            node("ans", "answer", answer="{{#llm.text#}}"),
        ],
        [edge("start", "llm"), edge("llm", "ans")],
    )
    with fake.FakeLLMServer([fake.stall_after(2, seconds=5), fake.tokens(["Hel", "lo"])]) as server:
        events = run_all(doc, server)
        assert len(server.requests) == 2
        gap = server.requests[1].received_at - server.requests[0].received_at
    (retry,) = of(events, ev.NodeRetry)
    assert retry.attempt == 1
    assert retry.error_type == "IdleTimeoutError"
    assert retry.partial_text == "t0 t1 "  # the failed attempt's text lives in its retry event
    assert gap >= 0.3 + 0.1 - 0.02  # idle budget, then the retry interval
    (done,) = of(events, ev.NodeSucceeded, "llm")
    assert done.attempt == 2
    assert done.outputs["text"] == "Hello"
    assert {c.attempt for c in of(events, ev.NodeFirstToken, "llm")} == {1, 2}
    assert isinstance(final(events), ev.WorkflowSucceeded)
    assert final(events).outputs == {"answer": "Hello"}


def test_retry_exhausted_then_fail_branch() -> None:
    doc = flow(
        [
            llm_node("llm", retry_config=RETRY, error_strategy="fail-branch"),
            node("ok", "answer", answer="ok: {{#llm.text#}}"),
            node("sorry", "answer", answer="sorry: {{#llm.error_type#}}"),
        ],
        [edge("start", "llm"), edge("llm", "ok"), edge("llm", "sorry", "fail-branch")],
    )
    with fake.FakeLLMServer(fake.close_before_token()) as server:
        events = run_all(doc, server)
        assert len(server.requests) == 3  # 1 + max_retries
    assert [r.attempt for r in of(events, ev.NodeRetry)] == [1, 2]
    (handled,) = of(events, ev.NodeException)
    assert handled.strategy == "fail-branch"
    assert handled.error_type == "EmptyResponseError"
    assert handled.outputs == {
        "error_message": handled.error_message,
        "error_type": "EmptyResponseError",
    }
    assert not of(events, ev.NodeStarted, "ok")  # the success branch is skipped
    assert of(events, ev.NodeSucceeded, "sorry")
    done = final(events)
    assert isinstance(done, ev.WorkflowPartialSucceeded)
    assert done.exceptions_count == 1
    assert done.outputs == {"answer": "sorry: EmptyResponseError"}


def test_default_value_runs_the_normal_edges() -> None:
    defaults = [{"key": "text", "type": "string", "value": "fallback"}]
    doc = flow(
        [
            llm_node("llm", error_strategy="default-value", default_value=defaults),
            node("ans", "answer", answer="{{#llm.text#}} ({{#llm.error_type#}})"),
        ],
        [edge("start", "llm"), edge("llm", "ans")],
    )
    with fake.FakeLLMServer(fake.http_error(400, {"error": {"message": "bad"}})) as server:
        events = run_all(doc, server)
    (handled,) = of(events, ev.NodeException)
    assert handled.strategy == "default-value"
    assert handled.outputs["text"] == "fallback"
    assert handled.outputs["error_type"] == "BadRequestError"
    assert isinstance(final(events), ev.WorkflowPartialSucceeded)
    assert final(events).outputs == {"answer": "fallback (BadRequestError)"}


def test_no_strategy_fails_the_workflow_with_the_nodes_error() -> None:
    doc = flow(
        [llm_node("llm"), node("ans", "answer", answer="{{#llm.text#}}")],
        [edge("start", "llm"), edge("llm", "ans")],
    )
    with fake.FakeLLMServer(fake.http_error(401, {"error": {"message": "no"}})) as server:
        events = run_all(doc, server)
    (failed,) = of(events, ev.NodeFailed)
    assert failed.error_type == "AuthorizationError"
    assert not of(events, ev.NodeStarted, "ans")
    done = final(events)
    assert isinstance(done, ev.WorkflowFailed)
    assert done.error_type == "AuthorizationError"


def test_first_token_timeout_routes_to_fail_branch() -> None:
    doc = flow(
        [
            llm_node(
                "llm", error_strategy="fail-branch", invocation={"first_token_timeout_ms": 300}
            ),
            node("ok", "answer", answer="{{#llm.text#}}"),
            node("sorry", "answer", answer="{{#llm.error_type#}}"),
        ],
        [edge("start", "llm"), edge("llm", "ok"), edge("llm", "sorry", "fail-branch")],
    )
    started = time.monotonic()
    # Pings keep bytes flowing: only a deadline on the first *token* catches this.
    with fake.FakeLLMServer(fake.pings(0.05, duration=10)) as server:
        events = run_all(doc, server)
    assert time.monotonic() - started < 3.0
    (handled,) = of(events, ev.NodeException)
    assert handled.error_type == "FirstTokenTimeoutError"
    assert handled.outputs["error_type"] == "FirstTokenTimeoutError"
    assert final(events).outputs == {"answer": "FirstTokenTimeoutError"}


def test_streaming_reaches_the_answer_before_the_node_finishes_with_fail_branch() -> None:
    doc = flow(
        [
            llm_node("llm", error_strategy="fail-branch"),
            node("ans", "answer", answer="A: {{#llm.text#}}"),
            node("sorry", "answer", answer="x"),
        ],
        [edge("start", "llm"), edge("llm", "ans"), edge("llm", "sorry", "fail-branch")],
    )
    with fake.FakeLLMServer(fake.tokens(["one ", "two ", "three"], interval=0.05)) as server:
        events = run_all(doc, server)
    done_at = events.index(of(events, ev.NodeSucceeded, "llm")[0])
    streamed = [
        i for i, e in enumerate(events) if isinstance(e, ev.TextChunk) and e.source_node_id == "llm"
    ]
    assert streamed and streamed[0] < done_at
    text = "".join(e.text for e in of(events, ev.TextChunk, "ans"))
    assert text == "A: one two three"
    assert not of(events, ev.TextChunk, "sorry")


def test_parallel_branches_overlap_in_time() -> None:
    doc = flow(
        [llm_node("a"), llm_node("b"), node("join", "answer", answer="{{#a.text#}}|{{#b.text#}}")],
        [edge("start", "a"), edge("start", "b"), edge("a", "join"), edge("b", "join")],
    )
    scenario = fake.tokens(["x"] * 5, interval=0.1)
    started = time.monotonic()
    with fake.FakeLLMServer(scenario) as server:
        events = run_all(doc, server)
        arrivals = sorted(r.received_at for r in server.requests)
    took = time.monotonic() - started
    assert arrivals[1] - arrivals[0] < 0.3  # the second request did not wait for the first
    assert took < 0.5 * 2 - 0.1  # less than the two streams back to back
    assert final(events).outputs == {"answer": "xxxxx|xxxxx"}
    (join_started,) = of(events, ev.NodeStarted, "join")
    assert events.index(join_started) > max(
        events.index(of(events, ev.NodeSucceeded, n)[0]) for n in "ab"
    )


def _abort_when_streaming(run: Any, node_id: str, delay: float) -> tuple[list[ev.Event], float]:
    events: list[ev.Event] = []
    aborted_at: list[float] = []

    def abort() -> None:
        aborted_at.append(time.monotonic())
        run.abort("test abort")

    for event in run:
        events.append(event)
        if isinstance(event, ev.NodeStarted) and event.node_id == node_id:
            threading.Timer(delay, abort).start()
    return events, time.monotonic() - aborted_at[0]


def test_abort_cancels_an_in_flight_stream_within_a_second() -> None:
    doc = flow([llm_node("llm", retry_config=RETRY)], [edge("start", "llm")])
    with fake.FakeLLMServer(fake.headers_then_silence(30)) as server:
        run = load_workflow(doc).run({"query": "hi"}, settings=routes(server))
        events, after_abort = _abort_when_streaming(run, "llm", 0.3)
    assert after_abort < 1.0
    (stopped,) = of(events, ev.NodeStopped, "llm")
    assert stopped.error_type == "StreamCancelledError"
    assert not of(events, ev.NodeRetry)  # an abort is not retried
    assert isinstance(final(events), ev.WorkflowStopped)
    assert final(events).reason == "test abort"
    assert run.status == "stopped"


def test_abort_interrupts_the_retry_interval() -> None:
    slow_retry = {"retry_enabled": True, "max_retries": 3, "retry_interval": 30_000}
    doc = flow([llm_node("llm", retry_config=slow_retry)], [edge("start", "llm")])
    with fake.FakeLLMServer(fake.close_before_token()) as server:
        run = load_workflow(doc).run({"query": "hi"}, settings=routes(server))
        events: list[ev.Event] = []
        for event in run:
            events.append(event)
            if isinstance(event, ev.NodeRetry):
                threading.Timer(0.2, run.abort).start()
                started = time.monotonic()
        assert time.monotonic() - started < 1.5
        assert len(server.requests) == 1
    assert isinstance(final(events), ev.WorkflowStopped)


def test_max_run_time_stops_a_blocked_node() -> None:
    doc = flow([llm_node("llm")], [edge("start", "llm")])
    started = time.monotonic()
    with fake.FakeLLMServer(fake.headers_then_silence(30)) as server:
        events = run_all(doc, server, limits=RunLimits(max_run_seconds=0.5))
    assert time.monotonic() - started < 2.5
    done = final(events)
    assert isinstance(done, ev.WorkflowFailed)
    assert done.error_type == "LimitExceededError"
    assert "time limit" in (done.error_message or "")
    assert of(events, ev.NodeStopped, "llm")[0].error_type == "StreamCancelledError"


@pytest.mark.parametrize("legacy", [True, False])
def test_gate_budgets_never_reach_the_model(legacy: bool) -> None:
    params = {"max_tokens": 8, "temperature": 0.3}
    extra: dict[str, Any] = {"invocation": {"first_token_timeout_ms": 2000}}
    if legacy:
        params["first_token_timeout_ms"] = 100  # the older spelling; invocation wins
    node_ = llm_node("llm", **extra)
    node_["data"]["model"]["completion_params"] = params
    doc = flow([node_], [edge("start", "llm")])
    # The first token comes after 0.4 s: within 2 s (invocation), not within 0.1 s (legacy).
    with fake.FakeLLMServer(fake.withhold_headers(0.4, fake.tokens(["ok"]))) as server:
        events = run_all(doc, server)
        body = server.requests[0].json()
    assert isinstance(final(events), ev.WorkflowSucceeded)
    assert "first_token_timeout_ms" not in str(body)
    assert body.get("temperature") == 0.3
