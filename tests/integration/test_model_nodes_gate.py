"""Every model-calling node type under the gate, in whole workflows over real
sockets: a first-token timeout goes into the node's retry, then its
fail-branch, then its default values; a busy probe makes it wait instead of
fail; a fallback target answers when the primary stalls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from firstgate.runtime.execution import events as ev
from firstgate.runtime.models.breakers import reset_shared_breakers

from tests import model_flows as mf
from tests.fakes import llm_server as fake
from tests.fakes import model_answers as ma
from tests.fakes import probe_server as ps

STALL = 30.0  # how long a stalled server holds a request (far past every budget here)
BUDGET_MS = 300


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("FIRSTGATE_FIRST_TOKEN_TIMEOUT_S", raising=False)
    monkeypatch.delenv("FIRSTGATE_FIRST_TOKEN_CEILING_S", raising=False)
    reset_shared_breakers()
    yield
    reset_shared_breakers()


NODES = pytest.mark.parametrize("node", mf.NODES, ids=[n.type for n in mf.NODES])


def posts(server: fake.FakeLLMServer) -> int:
    return sum(1 for r in server.requests if r.method == "POST")


def gated(node: mf.ModelNode, **extra: object) -> dict[str, object]:
    return mf.around(node, invocation={"first_token_timeout_ms": BUDGET_MS}, **extra)


@NODES
def test_a_first_token_timeout_is_retried_and_the_retry_answers(
    node: mf.ModelNode, tmp_path: Path
) -> None:
    scenario = ma.in_turn(ma.answer("late", delay=STALL), node.answer())
    with fake.FakeLLMServer(scenario) as srv:
        flow = gated(node, retry_config={"retry_enabled": True, "max_retries": 1})
        events = mf.run(tmp_path, flow, mf.routes(srv))
        assert posts(srv) == 2
    (retry,) = mf.of(events, ev.NodeRetry)
    assert retry.error_type == "FirstTokenTimeoutError" and retry.node_id == "n"
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {"value": node.expected}


@NODES
def test_a_first_token_timeout_past_the_retries_takes_the_fail_branch(
    node: mf.ModelNode, tmp_path: Path
) -> None:
    with fake.FakeLLMServer(ma.in_turn(ma.answer("late", delay=STALL))) as srv:
        flow = gated(
            node,
            retry_config={"retry_enabled": True, "max_retries": 1},
            error_strategy="fail-branch",
        )
        events = mf.run(tmp_path, flow, mf.routes(srv))
        assert posts(srv) == 2
    (handled,) = mf.of(events, ev.NodeException)
    assert (handled.strategy, handled.error_type) == ("fail-branch", "FirstTokenTimeoutError")
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowPartialSucceeded), done
    assert done.outputs == {"error": "FirstTokenTimeoutError"}


@NODES
def test_a_first_token_timeout_gives_the_default_values(node: mf.ModelNode, tmp_path: Path) -> None:
    default = {"key": node.output, "type": "string", "value": "fallback value"}
    with fake.FakeLLMServer(ma.in_turn(ma.answer("late", delay=STALL))) as srv:
        defaults = [default, *node.branch_defaults]
        flow = gated(node, error_strategy="default-value", default_value=defaults)
        events = mf.run(tmp_path, flow, mf.routes(srv))
    (handled,) = mf.of(events, ev.NodeException)
    assert (handled.strategy, handled.error_type) == ("default-value", "FirstTokenTimeoutError")
    assert handled.outputs[node.output] == "fallback value"
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowPartialSucceeded), done
    assert done.outputs == {"value": "fallback value"}


@NODES
def test_a_busy_probe_makes_the_node_wait_instead_of_fail(
    node: mf.ModelNode, tmp_path: Path
) -> None:
    # The answer comes after about four budgets; the server says it is busy meanwhile.
    slow = _delayed(node.answer(), 4 * BUDGET_MS / 1000)
    with ps.ProbeServer(slots=ps.always_busy(), chat=slow) as srv:
        settings = mf.routes(srv, probe="llama.cpp-slots")
        events = mf.run(tmp_path, gated(node, error_strategy="fail-branch"), settings)
        assert srv.count("/v1/chat/completions") == 1  # the same request kept going
        probes = len(srv.probe_requests())
    waits = mf.of(events, ev.NodeWaiting)
    assert len(waits) == probes >= 2
    assert {(w.node_id, w.target) for w in waits} == {("n", "primary")}
    assert not mf.of(events, ev.NodeException)
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {"value": node.expected}


def _delayed(scenario: fake.Scenario, seconds: float) -> fake.Scenario:
    def run(conn: fake.Conn) -> None:
        conn.sleep(seconds)
        scenario(conn)

    return run


@NODES
def test_an_idle_probe_lets_the_first_token_budget_fire(node: mf.ModelNode, tmp_path: Path) -> None:
    with ps.ProbeServer(slots=ps.always_idle(), chat=ma.answer("x", delay=STALL)) as srv:
        settings = mf.routes(srv, probe="llama.cpp-slots")
        events = mf.run(tmp_path, gated(node, error_strategy="fail-branch"), settings)
    assert not mf.of(events, ev.NodeWaiting)
    (handled,) = mf.of(events, ev.NodeException)
    assert handled.error_type == "FirstTokenTimeoutError"


@NODES
def test_a_stalled_primary_swaps_to_the_fallback(node: mf.ModelNode, tmp_path: Path) -> None:
    with (
        fake.FakeLLMServer(ma.in_turn(ma.answer("late", delay=STALL))) as primary,
        fake.FakeLLMServer(ma.in_turn(node.answer())) as backup,
    ):
        settings = {
            "providers": {
                "primary": {
                    "kind": "openai-compatible",
                    "base_url": primary.base_url,
                    "probe": "off",
                    "fallbacks": ["backup"],
                    "first_token_timeout_s": BUDGET_MS / 1000,
                    "allow_same_host_fallback": True,
                },
                "backup": {
                    "kind": "openai-compatible",
                    "base_url": backup.base_url,
                    "probe": "off",
                },
            }
        }
        events = mf.run(tmp_path, mf.around(node, error_strategy="fail-branch"), settings)
        assert (posts(primary), posts(backup)) == (1, 1)
    swaps = [e for e in mf.of(events, ev.NodeFallback) if e.kind == "swap"]
    assert [(s.reason, s.target) for s in swaps] == [("FirstTokenTimeoutError", "backup")]
    (done_node,) = [e for e in mf.of(events, ev.NodeSucceeded) if e.node_id == "n"]
    # An agent reports each of its model calls; the others their one call.
    call = (done_node.process_data.get("model_calls") or [done_node.process_data])[-1]
    assert call["route"] == "backup"
    assert call["fallback_failures"] == [
        {"target": "primary", "error_type": "FirstTokenTimeoutError"}
    ]
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {"value": node.expected}
