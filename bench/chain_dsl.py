"""A Dify-style export of a long chain, written the way the editor writes one:
start -> N template-transform nodes, each reading the one before -> end.

Shared by the load-and-validate benchmark and its baseline (graphon); the
nodes carry the editor's layout fields so that parsing costs what it costs
on a real export.
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


def chain_yaml(length: int) -> str:
    """The export as the editor's YAML (PyYAML's block style, keys sorted)."""
    return yaml.dump(chain_document(length), allow_unicode=True)


if __name__ == "__main__":
    import sys

    sys.stdout.write(chain_yaml(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
