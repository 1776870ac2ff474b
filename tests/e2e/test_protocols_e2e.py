"""The embedded llama-server speaks Anthropic's Messages API (`/v1/messages`)
and OpenAI's Responses API (`/v1/responses`) natively: a workflow LLM node on
a route of each kind streams a real reply through the gate (its
`node_first_token`, the text, the finish reason and the usage), and a gate
whose first-token budget is far too short for the real server still trips."""

from __future__ import annotations

from typing import Any

import pytest
from firstgate.plugin_daemon_client import LLMClient, first_token_gate
from firstgate.plugin_daemon_client import errors as E
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute

from tests import model_flows as mf
from tests.run_events import final


def base_url(server: Any, kind: str) -> str:
    # Anthropic's base_url is the API root; the Responses API's ends in /v1.
    return server.root_url if kind == "anthropic" else server.base_url


@pytest.mark.parametrize("kind", ["anthropic", "openai-responses"])
def test_an_llm_node_streams_through_the_gate(llama_server: Any, kind: str) -> None:
    data = {
        "type": "llm",
        "title": "Answer",
        "model": {**mf.MODEL, "completion_params": {"temperature": 0, "max_tokens": 8}},
        "prompt_template": [
            {"role": "system", "text": "You are brief."},
            {"role": "user", "text": "{{#start.q#}}"},
        ],
        "invocation": {"first_token_timeout_ms": 300_000},
    }
    flow = mf.workflow([{"id": "n", "data": data}], [("start", "n", "source")])
    route = ProviderRoute(kind=kind, base_url=base_url(llama_server, kind), probe="off")
    settings = RuntimeSettings(providers={"primary": route})
    events = list(load_workflow(flow, settings=settings).run({"q": "Say hi."}, settings=settings))
    assert isinstance(final(events), ev.WorkflowSucceeded), final(events)
    (first,) = [e for e in events if isinstance(e, ev.NodeFirstToken)]
    assert first.node_id == "n" and first.ttft > 0
    (node,) = [e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "n"]
    assert node.outputs["text"].strip()
    assert node.outputs["finish_reason"] in ("stop", "length")
    assert node.outputs["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("kind", ["anthropic", "openai-responses"])
def test_a_too_short_first_token_budget_trips_on_the_real_server(
    llama_server: Any, kind: str
) -> None:
    client = LLMClient(kind, base_url(llama_server, kind))
    long_prompt = f"Count the words of this {kind} text. " + "lorem ipsum dolor sit amet " * 120
    messages = [{"role": "user", "content": long_prompt}]
    with pytest.raises(E.FirstTokenTimeoutError):
        with first_token_gate(first_token_timeout=0.01):
            list(client.invoke_llm("m", messages, {"max_tokens": 4}))
