"""5. Engine overhead: scheduler cost per node on a 1,000-node linear chain of
template-transform nodes and a 100-branch fan-out/fan-in, in µs per node.
Baseline: rendering the same templates directly (the work the nodes do), so the
difference is what the engine adds.

    python -m bench.engine [--gevent] [--repeat 5]
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from bench.common import header, line, percentile  # noqa: E402
from nodes.jinja import render_jinja  # noqa: E402
from runtime import RunLimits, load_workflow  # noqa: E402
from runtime import events as ev  # noqa: E402

TEMPLATE = "{{ x }}+"


def start() -> dict[str, Any]:
    variables = [{"variable": "x", "label": "x", "type": "text-input"}]
    return {"id": "start", "data": {"type": "start", "title": "s", "variables": variables}}


def transform(node_id: str, source: str, field: str) -> dict[str, Any]:
    return {
        "id": node_id,
        "data": {
            "type": "template-transform",
            "title": node_id,
            "template": TEMPLATE,
            "variables": [{"variable": "x", "value_selector": [source, field]}],
        },
    }


def document(nodes: list[dict[str, Any]], edges: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "bench", "mode": "workflow"},
        "workflow": {
            "graph": {
                "nodes": nodes,
                "edges": [{"source": s, "target": t} for s, t in edges],
            }
        },
    }


def linear(n: int) -> dict[str, Any]:
    nodes, edges = [start()], []
    previous, field = "start", "x"
    for i in range(n):
        node_id = f"t{i}"
        nodes.append(transform(node_id, previous, field))
        edges.append((previous, node_id))
        previous, field = node_id, "output"
    return document(nodes, edges)


def fan(n: int) -> dict[str, Any]:
    nodes, edges = [start()], []
    for i in range(n):
        nodes.append(transform(f"b{i}", "start", "x"))
        edges.append(("start", f"b{i}"))
    nodes.append(
        {
            "id": "join",
            "data": {
                "type": "end",
                "title": "join",
                "outputs": [
                    {"variable": f"o{i}", "value_selector": [f"b{i}", "output"]} for i in range(n)
                ],
            },
        }
    )
    edges += [(f"b{i}", "join") for i in range(n)]
    return document(nodes, edges)


def timed_run(doc: dict[str, Any], nodes: int) -> float:
    workflow = load_workflow(doc)
    limits = RunLimits(max_steps=nodes + 10, max_run_seconds=600)
    start_t = time.perf_counter()
    events = list(workflow.run({"x": "a"}, limits=limits, clients=_NoClients()))
    took = time.perf_counter() - start_t
    done = next(e for e in reversed(events) if isinstance(e, ev.WorkflowFinished))
    assert isinstance(done, ev.WorkflowSucceeded), done
    return took


def direct(nodes: int) -> float:
    start_t = time.perf_counter()
    value = "a"
    for _ in range(nodes):
        value = render_jinja(TEMPLATE, {"x": value[:8]})
    return time.perf_counter() - start_t


class _NoClients:
    def client_for(self, provider: str) -> Any:
        raise RuntimeError("no LLM in this benchmark")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--gevent", action="store_true")
    args = parser.parse_args()
    header("5. engine overhead per node")
    for name, doc, count in (
        ("1,000-node linear chain", linear(1000), 1001),
        ("100-branch fan-out/fan-in", fan(100), 102),
    ):
        timed_run(doc, count)  # warm-up: template compilation, imports
        runs = [timed_run(doc, count) for _ in range(args.repeat)]
        work = [direct(count) for _ in range(args.repeat)]
        per_node = percentile(runs, 50) / count * 1e6
        work_per_node = percentile(work, 50) / count * 1e6
        line(
            f"{name:26s} {per_node:8.1f} µs/node (median of {args.repeat});"
            f" rendering alone {work_per_node:.1f} µs/node; engine adds"
            f" {per_node - work_per_node:.1f} µs/node ({per_node / work_per_node:.1f}x the work)"
        )


if __name__ == "__main__":
    main()
