"""Dify-style exports for the benchmarks, written the way the editor writes them:

- a long chain: start -> N template-transform nodes, each reading the one
  before -> end;
- a fan: start -> N template-transform nodes side by side -> one end that
  reads them all;
- an iteration over N numbers (a conversation variable) whose round is one
  template-transform node -> end.

Every template is different (as in real workflows: a cache of compiled
templates must hold them all). Shared by the load-and-validate and engine
benchmarks and their graphon baselines; the nodes carry the editor's layout
fields so that parsing costs what it costs on a real export.
"""

from __future__ import annotations

from typing import Any

import yaml

_Y_STEP = 120


def _node(node_id: str, index: int, data: dict[str, Any]) -> dict[str, Any]:
    position = {"x": 80 + 300 * index, "y": 282 + (index % 3) * _Y_STEP}
    return {
        "data": {"desc": "", "selected": False, **data},
        "height": 54,
        "id": node_id,
        "position": position,
        "positionAbsolute": dict(position),
        "selected": False,
        "sourcePosition": "right",
        "targetPosition": "left",
        "type": "custom",
        "width": 244,
    }


def _edge(source: str, source_type: str, target: str, target_type: str) -> dict[str, Any]:
    return {
        "data": {"isInIteration": False, "sourceType": source_type, "targetType": target_type},
        "id": f"{source}-source-{target}-target",
        "source": source,
        "sourceHandle": "source",
        "target": target,
        "targetHandle": "target",
        "type": "custom",
        "zIndex": 0,
    }


def chain_document(length: int) -> dict[str, Any]:
    """The mapping of an export with `length` template nodes between start and end."""
    start_id, end_id = "1700000000000", "1700000000001"
    nodes = [
        _node(
            start_id,
            0,
            {
                "title": "Start",
                "type": "start",
                "variables": [
                    {
                        "label": "text",
                        "max_length": 256,
                        "options": [],
                        "required": True,
                        "type": "text-input",
                        "variable": "text",
                    }
                ],
            },
        )
    ]
    edges = []
    previous, previous_type, previous_output = start_id, "start", "text"
    for index in range(1, length + 1):
        node_id = f"17000000{index:08d}"
        nodes.append(
            _node(
                node_id,
                index,
                {
                    "template": f"{{{{ arg1 }}}} (step {index}).",
                    "title": f"Template {index}",
                    "type": "template-transform",
                    "variables": [
                        {"value_selector": [previous, previous_output], "variable": "arg1"}
                    ],
                },
            )
        )
        edges.append(_edge(previous, previous_type, node_id, "template-transform"))
        previous, previous_type, previous_output = node_id, "template-transform", "output"
    nodes.append(
        _node(
            end_id,
            length + 1,
            {
                "outputs": [{"value_selector": [previous, previous_output], "variable": "result"}],
                "title": "End",
                "type": "end",
            },
        )
    )
    edges.append(_edge(previous, previous_type, end_id, "end"))
    return {
        "app": {
            "description": "",
            "icon": "🤖",
            "icon_background": "#FFEAD5",
            "mode": "workflow",
            "name": f"chain of {length}",
            "use_icon_as_answer_icon": False,
        },
        "kind": "app",
        "version": "0.1.5",
        "workflow": {
            "conversation_variables": [],
            "environment_variables": [],
            "features": {
                "file_upload": {"enabled": False},
                "opening_statement": "",
                "retriever_resource": {"enabled": True},
                "sensitive_word_avoidance": {"enabled": False},
                "speech_to_text": {"enabled": False},
                "suggested_questions": [],
                "suggested_questions_after_answer": {"enabled": False},
                "text_to_speech": {"enabled": False, "language": "", "voice": ""},
            },
            "graph": {"edges": edges, "nodes": nodes, "viewport": {"x": 0, "y": 0, "zoom": 1}},
        },
    }


def _template(node_id: str, index: int, text: str, source: list[str]) -> dict[str, Any]:
    return _node(
        node_id,
        index,
        {
            "template": text,
            "title": f"Template {index}",
            "type": "template-transform",
            "variables": [{"value_selector": source, "variable": "arg1"}],
        },
    )


def _start(node_id: str) -> dict[str, Any]:
    variable = {
        "label": "text",
        "max_length": 256,
        "options": [],
        "required": True,
        "type": "text-input",
        "variable": "text",
    }
    return _node(node_id, 0, {"title": "Start", "type": "start", "variables": [variable]})


def _app(
    name: str, nodes: list[dict[str, Any]], edges: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    document = chain_document(0)
    document["app"]["name"] = name
    workflow = document["workflow"]
    workflow["graph"]["nodes"] = nodes
    workflow["graph"]["edges"] = edges
    workflow.update(extra)
    return document


def fan_document(width: int) -> dict[str, Any]:
    """start -> `width` template nodes side by side -> one end reading them all."""
    start_id, end_id = "1700000000000", "1700000000001"
    nodes, edges, outputs = [_start(start_id)], [], []
    for index in range(1, width + 1):
        node_id = f"17100000{index:08d}"
        text = f"{{{{ arg1 }}}} (branch {index})."
        nodes.append(_template(node_id, index, text, [start_id, "text"]))
        edges.append(_edge(start_id, "start", node_id, "template-transform"))
        edges.append(_edge(node_id, "template-transform", end_id, "end"))
        outputs.append({"value_selector": [node_id, "output"], "variable": f"out{index}"})
    nodes.append(_node(end_id, width + 1, {"outputs": outputs, "title": "End", "type": "end"}))
    return _app(f"fan of {width}", nodes, edges)


def iteration_document(rounds: int) -> dict[str, Any]:
    """An iteration over `rounds` numbers (a conversation variable); each round
    renders one template -> end."""
    start_id, loop_id, end_id = "1700000000000", "1700000000002", "1700000000001"
    inner_start, inner = f"{loop_id}start", "1720000000000001"
    nodes = [
        _start(start_id),
        _node(
            loop_id,
            1,
            {
                "error_handle_mode": "terminated",
                "is_parallel": False,
                "iterator_input_type": "array[number]",
                "iterator_selector": ["conversation", "items"],
                "output_selector": [inner, "output"],
                "output_type": "array[string]",
                "parallel_nums": 10,
                "start_node_id": inner_start,
                "title": "Iteration",
                "type": "iteration",
            },
        ),
        {
            **_node(
                inner_start, 0, {"isInIteration": True, "title": "", "type": "iteration-start"}
            ),
            "parentId": loop_id,
            "type": "custom-iteration-start",
        },
        {
            **_template(inner, 1, "{{ arg1 }} (round).", [loop_id, "item"]),
            "parentId": loop_id,
        },
        _node(
            end_id,
            2,
            {
                "outputs": [{"value_selector": [loop_id, "output"], "variable": "result"}],
                "title": "End",
                "type": "end",
            },
        ),
    ]
    nodes[3]["data"].update(isInIteration=True, iteration_id=loop_id)
    edges = [
        _edge(start_id, "start", loop_id, "iteration"),
        _edge(inner_start, "iteration-start", inner, "template-transform"),
        _edge(loop_id, "iteration", end_id, "end"),
    ]
    edges[1]["data"].update(isInIteration=True, iteration_id=loop_id)
    items = {
        "id": "c0ffee00-0000-4000-8000-000000000001",
        "name": "items",
        "selector": ["conversation", "items"],
        "value": list(range(rounds)),
        "value_type": "array[number]",
        "description": "",
    }
    return _app(f"iteration of {rounds}", nodes, edges, conversation_variables=[items])


def chain_yaml(length: int) -> str:
    """The export as the editor's YAML (PyYAML's block style, keys sorted)."""
    return yaml.dump(chain_document(length), allow_unicode=True)


if __name__ == "__main__":
    import sys

    sys.stdout.write(chain_yaml(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
