"""Small builders for the connector tests: a flow around one node, settings, a run."""

from __future__ import annotations

from typing import Any

from runtime import events as ev
from runtime import load_workflow
from runtime.settings import RuntimeSettings


def one_node_flow(
    node_type: str,
    data: dict[str, Any],
    outputs: dict[str, list[str]],
    *,
    start_variables: list[dict[str, Any]] | None = None,
    mode: str = "workflow",
) -> dict[str, Any]:
    """start -> the node (id `n`) -> end, with `outputs` as the end node's outputs."""
    nodes = [
        {
            "id": "start",
            "data": {"type": "start", "title": "Start", "variables": start_variables or []},
        },
        {"id": "n", "data": {"type": node_type, "title": "Under test", **data}},
        {
            "id": "end",
            "data": {
                "type": "end",
                "title": "End",
                "outputs": [
                    {"variable": name, "value_selector": selector}
                    for name, selector in outputs.items()
                ],
            },
        },
    ]
    edges = [
        {"source": "start", "target": "n", "sourceHandle": "source"},
        {"source": "n", "target": "end", "sourceHandle": "source"},
    ]
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "t", "mode": mode},
        "workflow": {"graph": {"nodes": nodes, "edges": edges}},
    }


def settings(**sections: Any) -> RuntimeSettings:
    return RuntimeSettings.model_validate(sections)


def run_events(
    document: dict[str, Any], routes: RuntimeSettings | None = None, **inputs: Any
) -> list[ev.Event]:
    return list(load_workflow(document).run(inputs, settings=routes or settings()))


def node_end(events: list[ev.Event], node_id: str = "n") -> ev.Event:
    """The event that ended `node_id` (succeeded, exception or failed)."""
    ends = [e for e in events if isinstance(e, ev.NodeFinished) and e.node_id == node_id]
    assert ends, f"node {node_id} never ended: {[type(e).__name__ for e in events]}"
    return ends[-1]
