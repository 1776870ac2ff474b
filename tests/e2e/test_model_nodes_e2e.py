"""The question classifier, the parameter extractor and the support-triage
example against the real llama-server (SmolLM2-135M): the answers are
parseable and have the right shape (not necessarily the right wisdom)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute

from tests import model_flows as mf
from tests.run_events import final

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support_triage.yml"
GENEROUS = {"first_token_timeout_ms": 300_000}


def settings(server: Any, name: str) -> RuntimeSettings:
    route = ProviderRoute(kind="openai-compatible", base_url=server.base_url)
    return RuntimeSettings(providers={name: route})


def node_run(server: Any, data: dict[str, Any], q: str) -> ev.NodeSucceeded:
    flow = mf.workflow([{"id": "n", "data": data}], [("start", "n", "source")])
    events = list(load_workflow(flow).run({"q": q}, settings=settings(server, "primary")))
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    (node,) = [e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "n"]
    return node


def test_the_classifier_answers_one_of_its_classes(llama_server: Any) -> None:
    data = {
        **mf.classifier_data(),
        "model": {**mf.MODEL, "completion_params": {"temperature": 0, "max_tokens": 40}},
        "invocation": GENEROUS,
    }
    node = node_run(llama_server, data, "Where is my parcel? It is three days late.")
    assert node.outputs["class_id"] in ("c1", "c2")
    assert node.outputs["class_name"] in ("Billing", "Shipping")
    # The schema made the answer parseable JSON naming a class (no fallback was needed).
    assert '"category_id"' in node.process_data["answer"]
    assert node.outputs["usage"]["completion_tokens"] > 0


def test_the_extractor_answers_json_of_its_parameters(llama_server: Any) -> None:
    data = {
        **mf.extractor_data("prompt"),
        "model": {**mf.MODEL, "completion_params": {"temperature": 0, "max_tokens": 60}},
        "invocation": GENEROUS,
    }
    node = node_run(llama_server, data, "I want to stay in Lyon for two nights.")
    outputs = node.outputs
    assert isinstance(outputs["city"], str) and isinstance(outputs["nights"], int | float)
    assert outputs["__is_success"] in (0, 1)
    assert node.process_data["llm_text"].lstrip().startswith("{")


def test_the_support_triage_example_runs_end_to_end(llama_server: Any) -> None:
    workflow = load_workflow(EXAMPLE)
    message = "Order 4512 arrived broken, the mug is cracked."
    events = list(workflow.run({"message": message}, settings=settings(llama_server, "local")))
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    outputs = done.outputs
    assert outputs["category"] in ("A problem with an order or a delivery", "Anything else")
    assert isinstance(outputs["reply"], str)
    if "order_number" in outputs:  # the order branch ran: the extractor answered too
        assert isinstance(outputs["order_number"], int | float) and outputs["extracted"] in (0, 1)
    # What it answers on the embedded server, as a user runs it: tests/e2e/test_examples_e2e.py.


def test_the_extractor_in_function_call_mode_gets_an_answer_it_can_read(llama_server: Any) -> None:
    # Dify's default mode: the request carries one OpenAI tool.
    data = {
        **mf.extractor_data("function_call"),
        "model": {**mf.MODEL, "completion_params": {"temperature": 0, "max_tokens": 60}},
        "invocation": GENEROUS,
    }
    node = node_run(llama_server, data, "I want to stay in Lyon for two nights.")
    outputs = node.outputs
    assert isinstance(outputs["city"], str) and isinstance(outputs["nights"], int | float)
    assert outputs["__is_success"] in (0, 1)
    assert node.process_data["reasoning_mode"] == "function_call"


def test_the_agent_runs_its_rounds_with_the_real_time_tool(llama_server: Any) -> None:
    data = mf.agent_data(
        model={**mf.MODEL, "model": "m", "completion_params": {"temperature": 0, "max_tokens": 60}},
        maximum_iterations=2,
    )
    data["invocation"] = GENEROUS
    flow = mf.workflow(
        [{"id": "n", "data": data}, mf.end("out", text=["n", "text"])],
        [("start", "n", "source"), ("n", "out", "source")],
    )
    events = list(
        load_workflow(flow).run(
            {"q": "Which weekday was 2024-01-01?"}, settings=settings(llama_server, "primary")
        )
    )
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert isinstance(done.outputs["text"], str)
    rounds = [e for e in events if isinstance(e, ev.AgentLog) and e.label.startswith("ROUND")]
    assert rounds and all(e.status in ("start", "success") for e in rounds)


def test_the_agent_runs_react_rounds(llama_server: Any) -> None:
    # Whatever SmolLM2 writes, ReAct reads an action or takes the reply as the answer.
    data = mf.agent_data(
        "ReAct",
        model={**mf.MODEL, "model": "m", "completion_params": {"temperature": 0, "max_tokens": 60}},
        maximum_iterations=2,
    )
    data["invocation"] = GENEROUS
    flow = mf.workflow(
        [{"id": "n", "data": data}, mf.end("out", text=["n", "text"])],
        [("start", "n", "source"), ("n", "out", "source")],
    )
    run = load_workflow(flow).run(
        {"q": "Which weekday was 2024-01-01?"}, settings=settings(llama_server, "primary")
    )
    events = list(run)
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert isinstance(done.outputs["text"], str)
    assert any(isinstance(e, ev.AgentLog) and e.label == "ROUND 1" for e in events)


def test_structured_output_matches_its_schema_through_the_grammar(llama_server: Any) -> None:
    data = {
        **mf.structured_llm_data(),
        "model": {**mf.MODEL, "completion_params": {"temperature": 0, "max_tokens": 40}},
        "invocation": GENEROUS,
    }
    node = node_run(llama_server, data, "Name a city in France.")
    assert isinstance(node.outputs["structured_output"]["city"], str)
