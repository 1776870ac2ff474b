"""The engine's seams for containers and speed: child cancel tokens, variable
scopes, nodes run on the dispatcher, the compiled-template cache's size."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from firstgate.common.cancel import CancelToken
from firstgate.nodes.templates import jinja
from firstgate.runtime import RunLimits, RunOptions, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.execution.variable_pool import VariablePool

from tests.run_events import final


def test_a_child_token_follows_its_parent_until_released() -> None:
    parent = CancelToken()
    child = parent.child()
    child.cancel("round stopped")
    assert child.cancelled and not parent.cancelled
    second = parent.child()
    parent.cancel("abort")
    assert second.cancelled and second.reason == "abort"
    third = CancelToken()
    released = third.child()
    released.release()
    third.cancel("later")
    assert not released.cancelled
    # A child of a token already cancelled starts cancelled.
    assert parent.child().cancelled


def test_scopes_read_outwards_and_write_where_a_name_lives() -> None:
    pool = VariablePool({"query": "q"}, conversation={"n": 1}, conversation_types={"n": "number"})
    pool.set_outputs("before", {"x": "outer"})
    loop = pool.child({"lp": {"i": 0}}, {("lp", "i"): "number"})
    one, two = loop.child({"it": {"item": 1}}), loop.child({"it": {"item": 2}})
    one.set_outputs("node", {"out": "first"})
    two.set_outputs("node", {"out": "second"})
    assert (one.get(("node", "out")), two.get(("node", "out"))) == ("first", "second")
    assert pool.get(("node", "out")) is None  # a round's outputs stay in the round
    assert one.get(("before", "x")) == "outer" and one.get(("sys", "query")) == "q"
    one.set(("conversation", "n"), 5)
    two.set(("lp", "i"), 3)
    assert pool.get(("conversation", "n")) == 5  # the run's
    assert loop.get(("lp", "i")) == 3 and one.get(("lp", "i")) == 3  # the loop's
    assert (
        one.value_type(("lp", "i")) == "number"
        and one.value_type(("conversation", "n")) == "number"
    )


def chain(length: int, templates: list[str]) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = [{"id": "start", "data": {"type": "start", "title": "s"}}]
    edges = []
    previous = "start"
    for index in range(length):
        node_id = f"t{index}"
        nodes.append(
            {
                "id": node_id,
                "data": {
                    "type": "template-transform",
                    "title": node_id,
                    "template": templates[index % len(templates)],
                    "variables": [],
                },
            }
        )
        edges.append({"source": previous, "target": node_id})
        previous = node_id
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "t", "mode": "workflow"},
        "workflow": {"graph": {"nodes": nodes, "edges": edges}},
    }


def test_nodes_that_only_compute_run_on_the_dispatcher() -> None:
    run = load_workflow(chain(20, ["{{ 1 }}"])).run({})
    events = list(run)
    assert isinstance(final(events), ev.WorkflowSucceeded)
    assert run._workers._threads == []  # no thread hand-off at all


def test_a_template_the_dispatcher_cannot_render_moves_to_a_worker() -> None:
    # 3,000 inner loops (about 15 ms) run past the dispatcher's budget (2 ms),
    # not past a worker's (50 ms).
    heavy = "{% for i in range(3000) %}{% for j in range(10) %}{% endfor %}{% endfor %}done"
    run = load_workflow(chain(2, ["{{ 1 }}", heavy])).run(
        {}, RunOptions(limits=RunLimits(max_run_seconds=60))
    )
    events = list(run)
    outputs = [e.outputs for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "t1"]
    assert outputs == [{"output": "done"}]
    assert len(run._workers._threads) == 1


def test_the_template_cache_keeps_a_workflows_templates_however_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(jinja._TemplateCache, "BASE", 8)
    compiled: list[str] = []
    real = jinja._compile

    def counting(source: str) -> jinja.Compiled:
        compiled.append(source)
        return real(source)

    monkeypatch.setattr(jinja, "_compile", counting)
    jinja._COMPILED.clear()
    templates = [f"{{{{ {index} }}}}-{index}" for index in range(40)]  # 5x the base size
    workflow = load_workflow(chain(40, templates))
    for _ in range(3):
        assert isinstance(final(list(workflow.run({}))), ev.WorkflowSucceeded)
    assert len(compiled) == 40  # each once, not once per run
    # The room goes when the workflow does.
    del workflow
    gc.collect()
    assert jinja._COMPILED.capacity == 8
