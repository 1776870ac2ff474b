"""Loading iterations and loops: their graphs, what their rounds may read and
write, and the mistakes a hand-edited export can make, each named."""

from __future__ import annotations

from typing import Any

import pytest
from firstgate.runtime import DslError, load_workflow


def node(node_id: str, node_type: str, parent: str | None = None, **data: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"id": node_id, "data": {"type": node_type, "title": node_id, **data}}
    if parent is not None:
        found["parentId"] = parent
    return found


def edge(source: str, target: str) -> dict[str, Any]:
    return {"source": source, "target": target, "sourceHandle": "source"}


def doc(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, Any]:
    variables = [{"name": "xs", "value_type": "array[string]", "value": ["a"], "id": "xs"}]
    return {
        "version": "0.3.1",
        "kind": "app",
        "app": {"name": "t", "mode": "advanced-chat"},
        "workflow": {
            "conversation_variables": variables,
            "graph": {"nodes": [node("start", "start"), *nodes], "edges": edges},
        },
    }


def iteration(output: list[str] | None = None) -> list[dict[str, Any]]:
    return [
        node(
            "it",
            "iteration",
            iterator_selector=["conversation", "xs"],
            output_selector=output or ["inner", "output"],
            start_node_id="itstart",
        ),
        node("itstart", "iteration-start", "it"),
    ]


def tpl(node_id: str, parent: str | None, selector: list[str]) -> dict[str, Any]:
    return node(
        node_id,
        "template-transform",
        parent,
        template="{{ v }}",
        variables=[{"variable": "v", "value_selector": selector}],
    )


def loop(variables: list[str]) -> list[dict[str, Any]]:
    return [
        node(
            "lp",
            "loop",
            loop_count=3,
            start_node_id="lpstart",
            loop_variables=[
                {"label": v, "var_type": "number", "value_type": "constant", "value": 0}
                for v in variables
            ],
        ),
        node("lpstart", "loop-start", "lp"),
    ]


def problems(document: dict[str, Any]) -> list[str]:
    with pytest.raises(DslError) as caught:
        load_workflow(document)
    return [p.message_key for p in caught.value.problems]


def test_a_container_has_its_own_graph() -> None:
    workflow = load_workflow(
        doc(
            [
                *iteration(),
                tpl("inner", "it", ["it", "item"]),
                tpl("after", None, ["it", "output"]),
            ],
            [edge("start", "it"), edge("itstart", "inner"), edge("it", "after")],
        )
    )
    graph = workflow.graph
    assert set(graph.nodes) == {"start", "it", "after"}
    inner = graph.children["it"]
    assert set(inner.nodes) == {"itstart", "inner"} and inner.start_id == "itstart"
    assert set(graph.all_nodes) == {"start", "it", "after", "itstart", "inner"}


def test_an_older_iteration_starts_at_its_one_first_node() -> None:
    nodes = [
        node(
            "it",
            "iteration",
            iterator_selector=["conversation", "xs"],
            output_selector=["a", "output"],
            start_node_id="",
        ),
        tpl("a", "it", ["it", "item"]),
        tpl("b", "it", ["a", "output"]),
    ]
    workflow = load_workflow(doc(nodes, [edge("start", "it"), edge("a", "b")]))
    assert workflow.graph.children["it"].start_id == "a"


def test_the_item_is_read_inside_the_iteration_only() -> None:
    document = doc(
        [*iteration(), tpl("inner", "it", ["it", "item"]), tpl("after", None, ["it", "item"])],
        [edge("start", "it"), edge("itstart", "inner"), edge("it", "after")],
    )
    assert problems(document) == ["dsl.selector.unknownVariable"]


def test_the_iterations_output_is_read_after_it_not_inside() -> None:
    document = doc(
        [*iteration(), tpl("inner", "it", ["it", "output"])],
        [edge("start", "it"), edge("itstart", "inner")],
    )
    assert problems(document) == ["dsl.selector.unknownVariable"]


def test_a_node_after_the_iteration_cannot_read_a_node_inside_it() -> None:
    document = doc(
        [*iteration(), tpl("inner", "it", ["it", "item"]), tpl("after", None, ["inner", "output"])],
        [edge("start", "it"), edge("itstart", "inner"), edge("it", "after")],
    )
    warnings = load_workflow(document).warnings  # Dify loads it: the value is missing
    assert [p.message_key for p in warnings] == ["dsl.warning.notUpstream"]


def test_the_output_selector_must_name_something_that_exists() -> None:
    document = doc(
        [*iteration(["ghost", "output"]), tpl("inner", "it", ["it", "item"])],
        [edge("start", "it"), edge("itstart", "inner")],
    )
    assert problems(document) == ["dsl.selector.unknownNode"]


def test_an_edge_may_not_cross_into_a_container() -> None:
    document = doc(
        [*iteration(), tpl("inner", "it", ["it", "item"])],
        [edge("start", "it"), edge("itstart", "inner"), edge("start", "inner")],
    )
    assert problems(document) == ["dsl.edge.crossesContainer"]


def test_a_parent_that_is_not_a_container_is_named() -> None:
    document = doc(
        [tpl("a", None, ["start", "x"]), tpl("b", "a", ["start", "x"])],
        [edge("start", "a")],
    )
    keys = problems(document)
    assert "dsl.container.unknownParent" in keys


def test_a_round_start_outside_any_container_is_named() -> None:
    document = doc([node("stray", "iteration-start")], [edge("start", "stray")])
    assert "dsl.container.partOutside" in problems(document)


def test_a_container_without_a_start_is_named() -> None:
    nodes = [
        node(
            "it",
            "iteration",
            iterator_selector=["conversation", "xs"],
            output_selector=["a", "output"],
            start_node_id="nowhere",
        ),
        tpl("a", "it", ["it", "item"]),
        tpl("b", "it", ["it", "item"]),
    ]
    assert problems(doc(nodes, [edge("start", "it")])) == ["dsl.container.noStart"]


def assigner(node_id: str, parent: str | None, target: list[str]) -> dict[str, Any]:
    item = {"variable_selector": target, "operation": "+=", "input_type": "constant", "value": 1}
    return node(node_id, "assigner", parent, version="2", items=[item])


def test_a_loops_variables_are_written_inside_it_only() -> None:
    inside = doc(
        [*loop(["n"]), assigner("inc", "lp", ["lp", "n"])],
        [edge("start", "lp"), edge("lpstart", "inc")],
    )
    load_workflow(inside)
    outside = doc(
        [*loop(["n"]), assigner("inc", "lp", ["lp", "n"]), assigner("later", None, ["lp", "n"])],
        [edge("start", "lp"), edge("lpstart", "inc"), edge("lp", "later")],
    )
    assert "dsl.selector.notWritable" in problems(outside)


def test_an_iterations_item_is_not_writable() -> None:
    document = doc(
        [*iteration(), assigner("inner", "it", ["it", "item"])],
        [edge("start", "it"), edge("itstart", "inner")],
    )
    assert "dsl.selector.notWritable" in problems(document)


def test_a_break_condition_reads_loop_variables_and_the_rounds_nodes() -> None:
    nodes = [*loop(["n"]), assigner("inc", "lp", ["lp", "n"]), tpl("show", "lp", ["lp", "n"])]
    nodes[0]["data"]["break_conditions"] = [
        {"variable_selector": ["lp", "n"], "comparison_operator": "≥", "value": "2"},
        {"variable_selector": ["show", "output"], "comparison_operator": "is", "value": "2"},
    ]
    load_workflow(doc(nodes, [edge("start", "lp"), edge("lpstart", "inc"), edge("inc", "show")]))
    nodes[0]["data"]["break_conditions"] = [
        {"variable_selector": ["lp", "missing"], "comparison_operator": "≥", "value": "2"}
    ]
    document = doc(nodes, [edge("start", "lp"), edge("lpstart", "inc"), edge("inc", "show")])
    assert problems(document) == ["dsl.selector.unknownVariable"]
