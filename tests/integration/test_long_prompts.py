"""Long-context prompts: an LLM prompt has no character cap (Dify puts none on
it), only its route's `max_prompt_bytes`. A 600,000-character prompt reaches a
real-socket server whole, with the continuous first-token budget for its size;
past the route's bound the node fails with a typed error naming the limit and
the route, and nothing is sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from firstgate.plugin_daemon_client.first_token_budget import (
    BudgetFormula,
    estimate_prompt_tokens,
)
from firstgate.runtime.execution import events as ev

from tests.fakes import llm_server as fake
from tests.integration.test_workflow_fallback import flow_doc, of, run_yaml
from tests.run_events import final

CHAT = "/v1/chat/completions"
PROMPT = "word " * 120_000  # 600,000 characters, about 150k tokens


@pytest.fixture(autouse=True)
def _no_budget_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "FIRSTGATE_FIRST_TOKEN_TIMEOUT_S",
        "FIRSTGATE_FIRST_TOKEN_CEILING_S",
        "FIRSTGATE_FIRST_TOKEN_COLD_START_S",
        "FIRSTGATE_FIRST_TOKEN_BASE_S",
        "FIRSTGATE_FIRST_TOKEN_PER_1K_S",
    ):
        monkeypatch.delenv(name, raising=False)


def models(srv: fake.FakeLLMServer, **route: Any) -> dict[str, Any]:
    spec = {"kind": "openai-compatible", "base_url": srv.base_url, "probe": "off", **route}
    return {"providers": {"primary": spec}}


def test_a_600000_character_prompt_reaches_the_server_whole(tmp_path: Path) -> None:
    assert len(PROMPT) == 600_000
    with fake.FakeLLMServer(fake.tokens(["read ", "it"])) as srv:
        events = run_yaml(tmp_path, flow_doc(), models(srv), query=PROMPT)
        (request,) = [r for r in srv.requests if r.path == CHAT]
    (message,) = request.json()["messages"]
    assert message == {"role": "user", "content": PROMPT}
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {"answer": "read it"}
    (succeeded,) = [e for e in of(events, ev.NodeSucceeded) if e.node_id == "llm"]
    tokens = succeeded.process_data["prompt_tokens_estimate"]
    assert tokens == estimate_prompt_tokens([message]) and tokens > 140_000
    budget = succeeded.process_data["first_token_budget"]["primary"]
    # The continuous formula for its size (180 + 180 + 4 s per 1k tokens), under the ceiling.
    assert budget["source"] == "formula"
    assert budget["seconds"] == pytest.approx(BudgetFormula().budget(tokens))
    assert 900 < budget["seconds"] < 1800


def test_a_prompt_past_the_route_bound_fails_naming_it_and_sends_nothing(tmp_path: Path) -> None:
    with fake.FakeLLMServer(fake.tokens(["never"])) as srv:
        events = run_yaml(tmp_path, flow_doc(), models(srv, max_prompt_bytes=500_000), query=PROMPT)
        assert [r for r in srv.requests if r.path == CHAT] == []
    (handled,) = of(events, ev.NodeException)  # the flow's fail-branch takes it
    assert handled.error_type == "PromptTooLargeError"
    assert (
        handled.error_message
        == "the prompt passed 500000 bytes, the max_prompt_bytes of route primary"
    )


def test_a_bad_bound_is_a_located_settings_problem(tmp_path: Path) -> None:
    from firstgate.common.problems import DslError

    with fake.FakeLLMServer(fake.tokens(["x"])) as srv, pytest.raises(DslError) as info:
        run_yaml(tmp_path, flow_doc(), models(srv, max_prompt_bytes=10), query="hi")
    (problem,) = info.value.problems
    assert "providers.primary.max_prompt_bytes must be an integer between 1024" in problem.render()
