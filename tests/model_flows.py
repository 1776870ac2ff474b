"""Workflow documents around one model-calling node, for the tests that run
every such node type the same way (gate, retry, error strategies, probes,
fallbacks) against the fake servers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import load_settings

from tests import run_events
from tests.fakes import model_answers as ma
from tests.fakes.llm_server import Scenario

MODEL = {"provider": "primary", "name": "m", "mode": "chat"}


def workflow(nodes: list[dict[str, Any]], edges: list[tuple[str, str, str]]) -> dict[str, Any]:
    """A workflow (`mode: workflow`) with a start node taking `q`."""
    start = {
        "id": "start",
        "data": {
            "type": "start",
            "title": "Start",
            "variables": [{"variable": "q", "label": "q", "type": "paragraph", "required": True}],
        },
    }
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "model nodes", "mode": "workflow"},
        "workflow": {
            "graph": {
                "nodes": [start, *nodes],
                "edges": [{"source": s, "target": t, "sourceHandle": h} for s, t, h in edges],
            }
        },
    }


def end(node_id: str, **outputs: list[str]) -> dict[str, Any]:
    return {
        "id": node_id,
        "data": {
            "type": "end",
            "title": node_id,
            "outputs": [
                {"variable": name, "value_selector": list(selector)}
                for name, selector in outputs.items()
            ],
        },
    }


@dataclass(frozen=True)
class ModelNode:
    """How one model-calling node type is driven by the shared tests."""

    type: str
    data: Callable[[], dict[str, Any]]
    answer: Callable[[], Scenario]  # a reply the node reads as a success
    output: str  # an output that a success sets
    expected: Any  # its value after `answer`
    success_handle: str = "source"
    # Default values a branch node needs to take `success_handle` under default-value.
    branch_defaults: tuple[dict[str, Any], ...] = ()


def classifier_data() -> dict[str, Any]:
    return {
        "type": "question-classifier",
        "title": "Sort",
        "model": dict(MODEL),
        "query_variable_selector": ["start", "q"],
        "classes": [{"id": "c1", "name": "Billing"}, {"id": "c2", "name": "Shipping"}],
        "instruction": "",
    }


CLASSIFIER = ModelNode(
    "question-classifier",
    classifier_data,
    lambda: ma.answer('{"category_id": "c2", "category_name": "Shipping"}'),
    "class_name",
    "Shipping",
    success_handle="c2",
    branch_defaults=({"key": "class_id", "type": "string", "value": "c2"},),
)


def extractor_data(mode: str = "prompt") -> dict[str, Any]:
    return {
        "type": "parameter-extractor",
        "title": "Extract",
        "model": dict(MODEL),
        "query": ["start", "q"],
        "reasoning_mode": mode,
        "instruction": "",
        "parameters": [
            {"name": "city", "type": "string", "description": "the city", "required": True},
            {"name": "nights", "type": "number", "description": "how many nights"},
        ],
    }


EXTRACTOR = ModelNode(
    "parameter-extractor",
    extractor_data,
    lambda: ma.answer('{"city": "Lyon", "nights": 2}'),
    "city",
    "Lyon",
)
EXTRACTOR_FUNCTION_CALL = ModelNode(
    "parameter-extractor/function_call",
    lambda: extractor_data("function_call"),
    lambda: ma.answer("", [ma.Call("extract_parameters", {"city": "Lyon", "nights": 2})]),
    "city",
    "Lyon",
)

CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def structured_llm_data() -> dict[str, Any]:
    return {
        "type": "llm",
        "title": "Answer",
        "model": dict(MODEL),
        "prompt_template": [{"role": "user", "text": "{{#start.q#}}"}],
        "structured_output_enabled": True,
        "structured_output": {"schema": CITY_SCHEMA},
    }


STRUCTURED_LLM = ModelNode(
    "llm/structured-output",
    structured_llm_data,
    lambda: ma.answer('{"city": "Lyon"}'),
    "text",
    '{"city": "Lyon"}',
)

WEEKDAY_TOOL = {
    "enabled": True,
    "provider_name": "time",
    "type": "builtin",
    "tool_name": "weekday",
    "tool_label": "Weekday",
    "parameters": {
        "year": {"auto": 1, "value": None},
        "month": {"auto": 1, "value": None},
        "day": {"auto": 1, "value": None},
    },
    "extra": {"description": "the weekday of a date"},
}


def agent_data(strategy: str = "function_calling", **parameters: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "model": {"provider": "primary", "model": "m", "mode": "chat", "completion_params": {}},
        "tools": [WEEKDAY_TOOL],
        "instruction": "Use the tools when they help.",
        "query": "{{#start.q#}}",
        "maximum_iterations": 3,
        **parameters,
    }
    return {
        "type": "agent",
        "title": "Agent",
        "agent_strategy_provider_name": "langgenius/agent/agent",
        "agent_strategy_name": strategy,
        "agent_strategy_label": strategy,
        "agent_parameters": {k: {"type": "constant", "value": v} for k, v in values.items()},
    }


AGENT = ModelNode("agent", agent_data, lambda: ma.answer("Lyon"), "text", "Lyon")

NODES = [CLASSIFIER, EXTRACTOR, EXTRACTOR_FUNCTION_CALL, STRUCTURED_LLM, AGENT]


def around(node: ModelNode, **extra: Any) -> dict[str, Any]:
    """start -> the node -> `ok` (its success handle), and `failed` on the
    fail-branch when the node's error strategy is fail-branch."""
    data = {**node.data(), **extra}
    nodes = [{"id": "n", "data": data}, end("ok", value=["n", node.output])]
    edges = [("start", "n", "source"), ("n", "ok", node.success_handle)]
    if data.get("error_strategy") == "fail-branch":
        nodes.append(end("failed", error=["n", "error_type"]))
        edges.append(("n", "failed", "fail-branch"))
    return workflow(nodes, edges)


def routes(server: Any, **route: Any) -> dict[str, Any]:
    """One route `primary` to `server` (no liveness probe unless given)."""
    spec = {"kind": "openai-compatible", "base_url": server.base_url, "probe": "off", **route}
    return {"providers": {"primary": spec}}


def run(
    tmp_path: Path, flow: dict[str, Any], settings: dict[str, Any], q: str = "where is my parcel?"
) -> list[ev.Event]:
    flow_path = tmp_path / "flow.yml"
    settings_path = tmp_path / "settings.yml"
    flow_path.write_text(yaml.safe_dump(flow, sort_keys=False), encoding="utf-8")
    settings_path.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
    workflow_ = load_workflow(flow_path)
    return list(workflow_.run({"q": q}, settings=load_settings(settings_path)))


def of(events: list[ev.Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def final(events: list[ev.Event]) -> ev.WorkflowFinished:
    return run_events.final(events)
