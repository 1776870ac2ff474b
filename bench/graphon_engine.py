"""Baseline for `bench.engine`: graphon 0.8.0 running the same workflows, in
graphon's own interpreter (it needs Python 3.12+; `bench.validate` sets it up).

graphon's DSL importer renders templates with a fresh Jinja2 environment per
render; here its renderer is replaced by one that compiles each template once
(a cached renderer), so the figure is the engine's cost, not Jinja's
compiler's. The engine is built before the clock starts (building is
`bench.validate`'s business); the clock covers `Engine.run()` to its end.

    python bench/graphon_engine.py SHAPE SIZE REPEAT
        -> one JSON line {"run_s": best, "render_s": best, "run_cpu_s": best,
                          "render_cpu_s": best, "nodes": N}

SHAPE is `chain`, `fan` or `iteration` (`bench/chain_dsl.py`); `render_s` is
rendering the same templates with the same renderer, no engine.
"""

from __future__ import annotations

import copy
import functools
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import graphon.dsl as dsl  # noqa: E402
import graphon.dsl.importer as importer  # noqa: E402
import graphon.dsl.node_factory as node_factory  # noqa: E402
import jinja2  # noqa: E402
from graphon.engine_events.graph import GraphRunSucceededEvent  # noqa: E402

from bench.chain_dsl import chain_document, fan_document, iteration_document  # noqa: E402

_ENVIRONMENT = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined)


@functools.cache
def _compiled(template: str) -> jinja2.Template:
    return _ENVIRONMENT.from_string(template)


def _render(self: Any, template: str, variables: Mapping[str, Any]) -> str:
    return str(_compiled(template).render(**dict(variables)))


class _Parsed:
    """Stands in for the `yaml` module inside graphon's importer."""

    YAMLError = Exception

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    def safe_load(self, text: str) -> dict[str, Any]:
        return copy.deepcopy(self.document)


SHAPES = {"chain": chain_document, "fan": fan_document, "iteration": iteration_document}


def _templates(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The renders the workflow makes: each template node's template with a short input."""
    renders = []
    for node in document["workflow"]["graph"]["nodes"]:
        if node["data"]["type"] == "template-transform":
            renders.append((node["data"]["template"], {"arg1": "a"}))
    return renders


def main() -> int:
    shape, size, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    document = SHAPES[shape](size)
    node_factory._DefaultJinja2TemplateRenderer.render_template = _render  # type: ignore[method-assign]
    importer.yaml = _Parsed(document)  # type: ignore[assignment]
    renders = _templates(document) * (size if shape == "iteration" else 1)
    best = {"run_s": float("inf"), "render_s": float("inf")}
    best |= {"run_cpu_s": float("inf"), "render_cpu_s": float("inf")}
    for _ in range(repeat + 1):  # the first is a warm-up (imports, compiling)
        engine = dsl.loads("(parsed)", start_inputs={"text": "a"}, workers=5)
        started, cpu = time.perf_counter(), time.process_time()
        events = list(engine.run())
        took, took_cpu = time.perf_counter() - started, time.process_time() - cpu
        if not any(isinstance(e, GraphRunSucceededEvent) for e in events):
            print(json.dumps({"error": repr(events[-1])[:300]}))
            return 1
        best["run_s"] = min(best["run_s"], took)
        best["run_cpu_s"] = min(best["run_cpu_s"], took_cpu)
        started, cpu = time.perf_counter(), time.process_time()
        for template, variables in renders:
            _render(None, template, variables)
        best["render_s"] = min(best["render_s"], time.perf_counter() - started)
        best["render_cpu_s"] = min(best["render_cpu_s"], time.process_time() - cpu)
    print(json.dumps({**best, "nodes": len(renders)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
