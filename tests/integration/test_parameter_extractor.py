"""The parameter extractor in whole workflows against a fake model server, in
both reasoning modes: what the request carries (a tool, or a schema as the
response format), how the answer is read, and Dify's outcomes when it does
not fit or does not parse (the node succeeds with `__is_success: 0`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from firstgate.runtime.execution import events as ev

from tests import model_flows as mf
from tests.fakes import llm_server as fake
from tests.fakes import model_answers as ma

PARAMETERS = [
    {"name": "city", "type": "string", "description": "the city", "required": True},
    {"name": "nights", "type": "number", "description": "how many nights", "required": True},
    {"name": "breakfast", "type": "bool", "description": "with breakfast", "required": True},
    {"name": "room", "type": "select", "description": "room", "options": ["single", "double"]},
    {"name": "extras", "type": "array[string]", "description": "extras"},
]
NAMES = [p["name"] for p in PARAMETERS]


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRSTGATE_FIRST_TOKEN_TIMEOUT_S", raising=False)


def flow(mode: str, **extra: Any) -> dict[str, Any]:
    data = {**mf.extractor_data(mode), "parameters": PARAMETERS, **extra}
    outputs = {name: ["n", name] for name in [*NAMES, "__is_success", "__reason"]}
    return mf.workflow(
        [{"id": "n", "data": data}, mf.end("out", **outputs)],
        [("start", "n", "source"), ("n", "out", "source")],
    )


def run(
    tmp_path: Path, mode: str, scenario: fake.Scenario, **extra: Any
) -> tuple[dict[str, Any], dict[str, Any], ev.NodeSucceeded]:
    with fake.FakeLLMServer(ma.in_turn(scenario)) as srv:
        events = mf.run(tmp_path, flow(mode, **extra), mf.routes(srv), q="two nights in Lyon")
        body = json.loads(srv.requests[0].body)
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    (node,) = [e for e in mf.of(events, ev.NodeSucceeded) if e.node_id == "n"]
    return done.outputs, body, node


GOOD = {"city": "Lyon", "nights": 2, "breakfast": True, "room": "double", "extras": ["parking"]}


def test_prompt_mode_asks_for_the_json_with_the_schema_as_response_format(tmp_path: Path) -> None:
    outputs, body, node = run(tmp_path, "prompt", ma.answer(json.dumps(GOOD)))
    assert outputs == {**GOOD, "__is_success": 1, "__reason": None}
    assert body["stream"] is False and "tools" not in body
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["city", "nights", "breakfast"]
    assert schema["properties"]["breakfast"]["type"] == "boolean"
    assert schema["properties"]["room"]["enum"] == ["single", "double"]
    assert "two nights in Lyon" in body["messages"][-1]["content"]
    assert node.outputs["__usage"]["total_tokens"] == 19
    assert node.process_data["reasoning_mode"] == "prompt"


def test_function_call_mode_sends_one_tool_and_reads_its_arguments(tmp_path: Path) -> None:
    call = ma.Call("extract_parameters", GOOD)
    outputs, body, node = run(tmp_path, "function_call", ma.answer("", [call]))
    assert outputs == {**GOOD, "__is_success": 1, "__reason": None}
    (tool,) = body["tools"]
    assert tool["function"]["name"] == "extract_parameters"
    assert tool["function"]["parameters"]["required"] == ["city", "nights", "breakfast"]
    assert "response_format" not in body
    assert node.process_data["tool_call"]["name"] == "extract_parameters"


def test_function_call_mode_reads_a_text_answer_when_the_model_calls_nothing(
    tmp_path: Path,
) -> None:
    outputs, _, _ = run(tmp_path, "function_call", ma.answer(f"Here: {json.dumps(GOOD)}"))
    assert outputs["__is_success"] == 1 and outputs["city"] == "Lyon"


def test_values_are_coerced_and_the_misfit_is_the_reason(tmp_path: Path) -> None:
    answer = {**GOOD, "nights": "3"}
    outputs, _, _ = run(tmp_path, "prompt", ma.answer(json.dumps(answer)))
    assert outputs["nights"] == 3 and outputs["__is_success"] == 0
    assert (
        outputs["__reason"] == "parameter nights should be of type number, the answer gave string"
    )


def test_a_missing_required_parameter_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    answer = {k: v for k, v in GOOD.items() if k != "city"} | {"hotel": "Ritz"}
    outputs, _, _ = run(tmp_path, "prompt", ma.answer(json.dumps(answer)))
    assert outputs["__is_success"] == 0 and outputs["city"] == ""
    assert outputs["__reason"] == "the required parameter city is missing from the answer"


def test_an_answer_without_json_leaves_every_parameter_empty(tmp_path: Path) -> None:
    outputs, _, _ = run(tmp_path, "prompt", ma.answer("Lyon, two nights."))
    assert outputs == {
        "city": "",
        "nights": 0,
        "breakfast": False,
        "room": "",
        "extras": [],
        "__is_success": 0,
        # the scalars' empty values are one fewer than the parameters (no array)
        "__reason": "the answer has 4 values for 5 parameters",
    }


def test_an_answer_without_json_and_only_plain_scalars_says_so(tmp_path: Path) -> None:
    # (With an array, the count fails; with a select, its empty value is no option.)
    parameters = [p for p in PARAMETERS if p["name"] not in ("extras", "room")]
    data = {**mf.extractor_data("prompt"), "parameters": parameters}
    outputs_sel = {p["name"]: ["n", p["name"]] for p in parameters} | {"reason": ["n", "__reason"]}
    doc = mf.workflow(
        [{"id": "n", "data": data}, mf.end("out", **outputs_sel)],
        [("start", "n", "source"), ("n", "out", "source")],
    )
    with fake.FakeLLMServer(ma.in_turn(ma.answer("no idea"))) as srv:
        events = mf.run(tmp_path, doc, mf.routes(srv))
    assert mf.final(events).outputs["reason"] == (
        "the model's answer held no JSON object; every parameter is left empty"
    )


def test_the_instruction_is_a_template_in_the_system_prompt(tmp_path: Path) -> None:
    _, body, _ = run(
        tmp_path, "prompt", ma.answer(json.dumps(GOOD)), instruction="Dates in {{#start.q#}}."
    )
    assert "Dates in two nights in Lyon." in body["messages"][0]["content"]


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"parameters": [{"name": "x", "type": "date", "description": ""}]}, "not one of"),
        ({"parameters": [{"name": "__reason", "type": "string", "description": ""}]}, "reserved"),
        ({"parameters": []}, "at least 1"),
    ],
    ids=["unknown-type", "reserved-name", "no-parameters"],
)
def test_bad_parameters_are_refused_at_load(
    tmp_path: Path, patch: dict[str, Any], needle: str
) -> None:
    from firstgate.common.problems import DslError
    from firstgate.runtime import load_workflow

    path = tmp_path / "flow.yml"
    import yaml

    doc = mf.workflow(
        [{"id": "n", "data": {**mf.extractor_data(), **patch}}], [("start", "n", "source")]
    )
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(DslError) as caught:
        load_workflow(path)
    assert needle in str(caught.value)
