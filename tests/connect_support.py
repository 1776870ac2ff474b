"""Small builders for the connector tests: a flow around one node, settings, a run."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import RuntimeSettings


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


def chain_flow(
    steps: list[tuple[str, str, dict[str, Any]]],
    outputs: dict[str, list[str]],
    *,
    start_variables: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """start -> each (id, type, data) in order -> end, with `outputs` at the end."""
    document = one_node_flow("end", {}, {}, start_variables=start_variables)
    graph = document["workflow"]["graph"]
    start, _, end = graph["nodes"]
    end["data"]["outputs"] = [
        {"variable": name, "value_selector": selector} for name, selector in outputs.items()
    ]
    middle = [
        {"id": node_id, "data": {"type": kind, "title": node_id, **data}}
        for node_id, kind, data in steps
    ]
    graph["nodes"] = [start, *middle, end]
    ids = ["start", *(node_id for node_id, _, _ in steps), "end"]
    graph["edges"] = [
        {"source": a, "target": b, "sourceHandle": "source"} for a, b in itertools.pairwise(ids)
    ]
    return document


def abort_once(run: Any, ready: Any, reason: str = "stop") -> list[ev.Event]:
    """Consume `run` on a thread, abort it once `ready()` is true (within 10 s),
    and return its events; the run must end within 10 s of the abort."""
    events: list[ev.Event] = []
    thread = threading.Thread(target=lambda: events.extend(run))
    thread.start()
    started = time.monotonic()
    while not ready() and time.monotonic() - started < 10:
        time.sleep(0.01)
    run.abort(reason)
    thread.join(10)
    assert not thread.is_alive(), "the run did not end after the abort"
    return events
