"""Bad DSL files: each gives its specific, located message; all at once."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.runtime import DslError, load_workflow

GOOD: dict[str, Any] = {
    "version": "0.1.5",
    "kind": "app",
    "app": {"name": "t", "mode": "workflow", "icon": "🤖"},
    "workflow": {
        "features": {"opening_statement": ""},
        "graph": {
            "viewport": {"x": 0, "y": 0, "zoom": 1},
            "nodes": [
                {
                    "id": "1732007415000",
                    "type": "custom",
                    "position": {"x": 1, "y": 2},
                    "data": {
                        "type": "start",
                        "title": "Start",
                        "variables": [{"variable": "q", "type": "text-input"}],
                    },
                },
                {
                    "id": "1732007415808",
                    "type": "custom",
                    "data": {
                        "type": "llm",
                        "title": "Summarize",
                        "selected": False,
                        "model": {
                            "provider": "local",
                            "name": "smollm2",
                            "mode": "chat",
                            "completion_params": {},
                        },
                        "prompt_template": [{"role": "user", "text": "{{#1732007415000.q#}}"}],
                    },
                },
                {
                    "id": "end",
                    "type": "custom",
                    "data": {
                        "type": "end",
                        "title": "End",
                        "outputs": [
                            {"variable": "out", "value_selector": ["1732007415808", "text"]}
                        ],
                    },
                },
            ],
            "edges": [
                {
                    "id": "e1",
                    "source": "1732007415000",
                    "target": "1732007415808",
                    "sourceHandle": "source",
                },
                {"id": "e2", "source": "1732007415808", "target": "end", "sourceHandle": "source"},
            ],
        },
    },
}


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "flow.yml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def warnings_of(tmp_path: Path, doc: dict[str, Any]) -> list[str]:
    path = tmp_path / "warned.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return [w.render() for w in load_workflow(path).warnings]


def problems(tmp_path: Path, doc: dict[str, Any]) -> list[str]:
    with pytest.raises(DslError) as info:
        load_workflow(write(tmp_path, doc))
    # What is wrong, without the line it is at (test_validate_lines.py checks those).
    return [str(dataclasses.replace(p, place=None)) for p in info.value.problems]


def mutated(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    nodes = {n["id"]: n for n in doc["workflow"]["graph"]["nodes"]}
    for node_id, data in changes.items():
        nodes[node_id]["data"].update(data)
    return doc


def llm(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["workflow"]["graph"]["nodes"][1]["data"]


def test_the_good_file_loads_and_editor_keys_are_ignored(tmp_path: Path) -> None:
    workflow = load_workflow(write(tmp_path, GOOD))
    assert set(workflow.graph.nodes) == {"1732007415000", "1732007415808", "end"}


def test_retry_config_message_names_node_title_type_field_and_value(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    llm(doc)["retry_config"] = {
        "retry_enabled": True,
        "max_retries": "three",
        "retry_interval": 100,
    }
    assert problems(tmp_path, doc) == [
        'node 1732007415808 "Summarize" (llm): retry_config.max_retries must be an integer between 0 and 10, got "three"'
    ]


def test_a_dify_node_type_not_supported_yet_is_refused_by_name(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    doc["workflow"]["graph"]["nodes"].append(
        {"id": "x", "data": {"type": "knowledge-index", "title": "Ag"}}
    )
    (message,) = problems(tmp_path, doc)
    assert (
        message == 'node x "Ag" (knowledge-index): node type "knowledge-index" is not supported yet'
    )


def test_unknown_node_type_lists_supported_types(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    doc["workflow"]["graph"]["nodes"].append(
        {"id": "x", "data": {"type": "no-such-node", "title": "Py"}}
    )
    (message,) = problems(tmp_path, doc)
    assert message.startswith(
        'node x "Py" (no-such-node): unsupported node type "no-such-node"; supported types: '
    )
    assert "if-else" in message and "template-transform" in message and "llm" in message


def test_edge_to_a_missing_node(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    doc["workflow"]["graph"]["edges"].append({"id": "e9", "source": "end", "target": "ghost"})
    assert problems(tmp_path, doc) == ["edge e9 connects node ghost, which does not exist"]


def test_cycle(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    doc["workflow"]["graph"]["edges"].append(
        {"id": "back", "source": "end", "target": "1732007415808"}
    )
    (message,) = problems(tmp_path, doc)
    assert message.startswith("the graph has a cycle: ")
    assert '1732007415808 "Summarize"' in message and 'end "End"' in message


def test_no_start_node(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    doc["workflow"]["graph"]["nodes"].pop(0)
    doc["workflow"]["graph"]["edges"].pop(0)
    assert "the graph has no start node" in problems(tmp_path, doc)


def test_selector_to_a_missing_node_and_a_missing_variable(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    llm(doc)["prompt_template"] = [
        {"role": "user", "text": "{{#nobody.q#}} {{#1732007415000.nope#}}"}
    ]
    found = problems(tmp_path, doc)
    assert found == [
        'node 1732007415808 "Summarize" (llm): nobody.q refers to node nobody, which does not exist',
        'node 1732007415808 "Summarize" (llm): 1732007415000.nope refers to variable nope, which node '
        '1732007415000 "Start" does not output (it outputs: q)',
    ]


def test_selector_to_a_node_that_runs_later(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    llm(doc)["prompt_template"] = [{"role": "user", "text": "{{#end.out#}}"}]
    (message,) = warnings_of(tmp_path, doc)  # Dify loads it: the value is missing at run time
    assert 'end.out refers to node end "End", which does not run before this node' in message
    assert message.endswith("the value is missing when this node reads it")


def test_default_value_checked_against_its_type(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    llm(doc)["error_strategy"] = "default-value"
    llm(doc)["default_value"] = [{"key": "text", "type": "number", "value": "many"}]
    assert problems(tmp_path, doc) == [
        'node 1732007415808 "Summarize" (llm): default_value[0].value must be of type number, got "many"'
    ]


def test_invocation_and_strategy_values(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    llm(doc)["invocation"] = {"first_token_timeout_ms": -5, "idle_timeout_ms": "soon"}
    llm(doc)["error_strategy"] = "ignore"
    found = problems(tmp_path, doc)
    assert (
        'node 1732007415808 "Summarize" (llm): error_strategy must be one of fail-branch, default-value, got "ignore"'
        in found
    )
    assert any(
        "invocation.first_token_timeout_ms must be a whole number of milliseconds" in p
        and "got -5" in p
        for p in found
    )
    assert any("invocation.idle_timeout_ms" in p and 'got "soon"' in p for p in found)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    llm(doc)["retry_config"] = {"max_retries": 99}
    doc["workflow"]["graph"]["nodes"].append({"id": "x", "data": {"type": "code", "title": "Py"}})
    doc["workflow"]["graph"]["edges"].append({"id": "e9", "source": "end", "target": "ghost"})
    doc["workflow"]["graph"]["nodes"][2]["data"]["outputs"] = [
        {"variable": "o", "value_selector": ["1732007415000", "zz"]}
    ]
    assert len(problems(tmp_path, doc)) == 4


def test_bad_yaml_and_missing_file_are_dsl_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("app: [unclosed\n", encoding="utf-8")
    with pytest.raises(DslError) as info:
        load_workflow(bad)
    assert str(info.value).startswith(f"{bad}, line 2, column 1: not valid YAML: ")
    with pytest.raises(DslError) as info:
        load_workflow(tmp_path / "missing.yml")
    assert str(info.value) == f"file not found: {tmp_path / 'missing.yml'}"


def test_bad_mode_and_edge_handle(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    doc["app"]["mode"] = "assistant"
    assert problems(tmp_path, doc) == [
        "app.mode must be one of workflow, advanced-chat, chat, agent-chat, completion,"
        ' got "assistant"'
    ]
    doc = copy.deepcopy(GOOD)
    doc["workflow"]["graph"]["edges"][1]["sourceHandle"] = "fail-branch"
    (message,) = warnings_of(tmp_path, doc)  # Dify loads it and never takes it
    assert (
        'leaves through handle "fail-branch", which this node does not have (it has: source)'
        in message
    )
