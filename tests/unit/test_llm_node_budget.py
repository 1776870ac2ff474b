"""The LLM node's call site of the first-token budget: what the gate a request
actually ran under was given (budget, ceiling, probe, prompt size), read from
inside the client call through `current_gate()`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from firstgate.common.cancel import CancelToken
from firstgate.nodes import llm
from firstgate.nodes.base import NodeContext, RoutePlan, RouteTarget
from firstgate.plugin_daemon_client import LLMChunk, current_gate
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.first_token_budget import (
    ENV_CEILING,
    ENV_TIMEOUT,
    estimate_prompt_tokens,
)
from pydantic import ValidationError

ENV_VARS = (ENV_TIMEOUT, ENV_CEILING, "FIRSTGATE_FIRST_TOKEN_COLD_START_S")
ENV_VARS += ("FIRSTGATE_FIRST_TOKEN_BASE_S", "FIRSTGATE_FIRST_TOKEN_PER_1K_S")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


@dataclass
class Seen:
    first_token: float | None
    ceiling: float | None
    probe: Any
    prompt_tokens: int | None


@dataclass
class RecordingClient:
    """Records the gate each call ran under; optionally fails first."""

    seen: list[Seen] = field(default_factory=list)
    error: Exception | None = None
    on_call: Any = None

    def invoke_llm(self, **_: Any) -> Iterator[LLMChunk]:
        gate = current_gate()
        assert gate is not None, "the request must run inside the node's gate"
        self.seen.append(
            Seen(gate.budgets.first_token, gate.budgets.ceiling, gate.probe, gate.prompt_tokens)
        )
        if self.on_call is not None:
            self.on_call(gate)
        if self.error is not None:
            raise self.error
        yield LLMChunk(text="ok")


@dataclass
class Planner:
    plan: RoutePlan

    def client_for(self, provider: str) -> Any:
        return self.plan.primary.client

    def plan_for(self, provider: str) -> RoutePlan:
        return self.plan


class Vars:
    def get(self, selector: Any) -> Any:
        return "a question " * 50


def data(**invocation: Any) -> llm.Data:
    return llm.Data.model_validate(
        {
            "type": "llm",
            "model": {"provider": "p", "name": "m"},
            "prompt_template": [{"role": "user", "text": "{{#start.q#}}"}],
            "invocation": invocation,
        }
    )


def context(clients: Any, **kw: Any) -> NodeContext:
    return NodeContext(
        node_id="n", attempt=1, variables=Vars(), cancel=CancelToken(), clients=clients, **kw
    )


def single(route: dict[str, Any], probe: Any = None) -> tuple[Planner, RecordingClient]:
    client = RecordingClient()
    target = RouteTarget("r", client, "http://127.0.0.1:1/v1", probe, route)
    return Planner(RoutePlan(target)), client


def prompt_tokens() -> int:
    return estimate_prompt_tokens([{"role": "user", "content": Vars().get(None)}])


ROUTE = {"first_token_timeout_s": 9.0, "first_token_ceiling_s": 99.0}


@pytest.mark.parametrize(
    ("invocation", "env", "route", "expected", "source"),
    [
        ({"first_token_timeout_ms": 2000}, {ENV_TIMEOUT: "7"}, ROUTE, 2.0, "node"),
        ({"first_token_timeout_ms": "auto"}, {ENV_TIMEOUT: "7"}, ROUTE, 7.0, "env"),
        ({}, {ENV_TIMEOUT: "7"}, ROUTE, 7.0, "env"),
        ({"first_token_timeout_ms": ""}, {}, ROUTE, 9.0, "route"),
        ({}, {}, {}, None, "formula"),
        ({"first_token_timeout_ms": 0}, {ENV_TIMEOUT: "7"}, ROUTE, None, "node"),
    ],
    ids=["node", "auto-env", "empty-env", "route", "formula", "node-zero-disables"],
)
def test_precedence_node_env_route_formula(
    monkeypatch: pytest.MonkeyPatch,
    invocation: dict[str, Any],
    env: dict[str, str],
    route: dict[str, Any],
    expected: float | None,
    source: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    planner, client = single(route)
    result = llm.run(data(**invocation), context(planner))
    (seen,) = client.seen
    tokens = prompt_tokens()
    if source == "formula":
        expected = 180.0 + 180.0 + 4.0 * tokens / 1000.0
    if expected is None:
        assert seen.first_token is None  # disabled, not "fire at once"
    else:
        assert seen.first_token == pytest.approx(expected)
    assert seen.prompt_tokens == tokens
    budget = result.process_data["first_token_budget"]["r"]  # type: ignore[index]
    assert budget["source"] == source
    assert budget["seconds"] == seen.first_token
    assert result.process_data["prompt_tokens_estimate"] == tokens  # type: ignore[index]


def test_env_ceiling_beats_route_ceiling_and_reaches_the_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    planner, client = single(ROUTE)
    llm.run(data(), context(planner))
    monkeypatch.setenv(ENV_CEILING, "55")
    llm.run(data(), context(planner))
    assert [s.ceiling for s in client.seen] == [99.0, 55.0]


def test_the_routes_probe_is_handed_to_the_gate() -> None:
    def probe() -> str:
        return "busy"

    planner, client = single({}, probe=probe)
    llm.run(data(), context(planner))
    assert client.seen[0].probe is probe


def test_a_plain_client_provider_gets_the_formula() -> None:
    client = RecordingClient()

    class Plain:
        def client_for(self, provider: str) -> RecordingClient:
            return client

    result = llm.run(data(), context(Plain()))
    assert client.seen[0].first_token == pytest.approx(360.0 + 4.0 * prompt_tokens() / 1000.0)
    assert result.process_data["route"] == "p"  # type: ignore[index]


def test_every_fallback_target_gets_its_own_routes_budget_and_the_cancel() -> None:
    primary = RecordingClient(error=E.ConnectError(url="u", detail="refused"))
    cancel = CancelToken()
    tripped: list[Any] = []

    def abort_inside(gate: Any) -> None:
        cancel.cancel("abort")  # the attached token must reach this attempt's gate
        tripped.append(gate.tripped)

    backup = RecordingClient(on_call=abort_inside)
    plan = RoutePlan(
        RouteTarget("a", primary, "http://10.0.0.1/v1", None, {"first_token_timeout_s": 5}),
        (RouteTarget("b", backup, "http://10.0.0.2/v1", None, {"first_token_timeout_s": 11}),),
    )
    events: list[Any] = []
    ctx = NodeContext(
        node_id="n",
        attempt=1,
        variables=Vars(),
        cancel=cancel,
        clients=Planner(plan),
        emit_fallback=events.append,
    )
    llm.run(data(), ctx)
    assert [s.first_token for s in primary.seen + backup.seen] == [5.0, 11.0]
    assert isinstance(tripped[0], E.StreamCancelledError)
    assert [e.kind for e in events] == ["cap", "swap", "cap"]


@pytest.mark.parametrize("value", ["soon", -1, 1.5])
def test_first_token_field_rejects_what_is_not_ms_auto_or_empty(value: Any) -> None:
    with pytest.raises(ValidationError) as info:
        data(first_token_timeout_ms=value)
    assert info.value.errors()[0]["type"] == "dsl.firstTokenMilliseconds"


def test_auto_is_accepted_in_any_case_and_in_the_legacy_spelling() -> None:
    assert data(first_token_timeout_ms="AUTO").invocation.first_token_timeout_ms is None
    legacy = llm.Data.model_validate(
        {
            "type": "llm",
            "model": {
                "provider": "p",
                "name": "m",
                "completion_params": {"first_token_timeout_ms": "auto", "top_p": 0.5},
            },
            "prompt_template": [{"role": "user", "text": "x"}],
        }
    )
    assert legacy.invocation.first_token_timeout_ms is None
    assert legacy.model.completion_params == {"top_p": 0.5}
