"""The question classifier in whole workflows against a fake model server:
the chosen class's edge runs, the request is one non-streamed call for a JSON
answer constrained to the class ids, and an answer that does not parse is
handled as Dify handles it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from firstgate.runtime.execution import events as ev

from tests import model_flows as mf
from tests.fakes import llm_server as fake
from tests.fakes import model_answers as ma


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRSTGATE_FIRST_TOKEN_TIMEOUT_S", raising=False)


def branches(**classifier: Any) -> dict[str, Any]:
    """start -> sort -> billing (c1) | shipping (c2) | failed (fail-branch)."""
    data = {**mf.classifier_data(), "error_strategy": "fail-branch", **classifier}
    return mf.workflow(
        [
            {"id": "n", "data": data},
            mf.end("billing", name=["n", "class_name"], id=["n", "class_id"]),
            mf.end("shipping", name=["n", "class_name"], label=["n", "class_label"]),
            mf.end("failed", error=["n", "error_type"], message=["n", "error_message"]),
        ],
        [
            ("start", "n", "source"),
            ("n", "billing", "c1"),
            ("n", "shipping", "c2"),
            ("n", "failed", "fail-branch"),
        ],
    )


def run(
    tmp_path: Path, answer: str, q: str = "my parcel is late", **classifier: Any
) -> tuple[list[ev.Event], fake.FakeLLMServer]:
    with fake.FakeLLMServer(ma.in_turn(ma.answer(answer))) as srv:
        events = mf.run(tmp_path, branches(**classifier), mf.routes(srv), q=q)
    return events, srv


def ran(events: list[ev.Event]) -> set[str]:
    return {e.node_id for e in mf.of(events, ev.NodeSucceeded)}


def test_the_chosen_class_takes_its_edge_and_the_others_are_skipped(tmp_path: Path) -> None:
    events, srv = run(tmp_path, '{"category_id": "c2", "category_name": "Shipping"}')
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {"name": "Shipping", "label": "CLASS 2"}
    assert ran(events) == {"start", "n", "shipping"}
    (request,) = [r for r in srv.requests if r.method == "POST"]
    body = json.loads(request.body)
    assert body["stream"] is False
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["category_id"]["enum"] == ["c1", "c2"]
    last = body["messages"][-1]["content"]
    assert "my parcel is late" in last and '"category_name": "Billing"' in last


def test_the_node_reports_its_answer_prompt_route_and_usage(tmp_path: Path) -> None:
    events, _ = run(tmp_path, '{"category_id": "c1", "category_name": "Billing"}')
    (node,) = [e for e in mf.of(events, ev.NodeSucceeded) if e.node_id == "n"]
    assert node.outputs["class_id"] == "c1" and node.outputs["usage"]["total_tokens"] == 19
    data = node.process_data
    assert data["route"] == "primary" and data["answer"].startswith('{"category_id": "c1"')
    assert data["prompts"][0]["role"] == "system" and data["model_name"] == "m"
    assert data["first_token_budget"]["primary"]["source"] == "formula"


def test_an_answer_naming_no_class_takes_the_first_class(tmp_path: Path) -> None:
    events, _ = run(tmp_path, '{"category_id": "c9", "category_name": "Other"}')
    assert mf.final(events).outputs == {"name": "Billing", "id": "c1"}


def test_an_answer_without_json_fails_into_the_error_strategy(tmp_path: Path) -> None:
    events, _ = run(tmp_path, "I think this is about shipping.")
    (handled,) = mf.of(events, ev.NodeException)
    assert handled.error_type == "ClassifierAnswerError"
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowPartialSucceeded)
    assert done.outputs["error"] == "ClassifierAnswerError"
    assert "I think this is about shipping." in done.outputs["message"]


def test_default_values_naming_no_class_take_the_first_class_edge(tmp_path: Path) -> None:
    # A branch node under default-value must still take exactly one branch.
    default = [{"key": "class_name", "type": "string", "value": "unsure"}]
    data = {**mf.classifier_data(), "error_strategy": "default-value", "default_value": default}
    flow = mf.workflow(
        [
            {"id": "n", "data": data},
            mf.end("billing", name=["n", "class_name"], id=["n", "class_id"]),
            mf.end("shipping", name=["n", "class_name"]),
        ],
        [("start", "n", "source"), ("n", "billing", "c1"), ("n", "shipping", "c2")],
    )
    with fake.FakeLLMServer(ma.in_turn(ma.answer("no JSON here"))) as srv:
        events = mf.run(tmp_path, flow, mf.routes(srv))
    (handled,) = mf.of(events, ev.NodeException)
    assert handled.strategy == "default-value"
    assert {e.node_id for e in mf.of(events, ev.NodeSucceeded)} == {"start", "billing"}
    assert mf.final(events).outputs["name"] == "unsure"


def test_class_names_and_the_instruction_are_templates(tmp_path: Path) -> None:
    classes = [{"id": "c1", "name": "About {{#start.q#}}"}, {"id": "c2", "name": "Other"}]
    with fake.FakeLLMServer(ma.in_turn(ma.answer('{"category_id": "c1"}'))) as srv:
        flow = branches(classes=classes, instruction="Prefer {{#start.q#}}.")
        events = mf.run(tmp_path, flow, mf.routes(srv), q="tea")
        body = json.loads(srv.requests[0].body)
    assert mf.final(events).outputs == {"name": "About tea", "id": "c1"}
    assert "Prefer tea." in body["messages"][0]["content"]


def test_a_route_without_schema_support_gets_the_prompt_alone(tmp_path: Path) -> None:
    with fake.FakeLLMServer(ma.in_turn(ma.answer('{"category_id": "c2"}'))) as srv:
        events = mf.run(tmp_path, branches(), mf.routes(srv, json_schema=False))
        body = json.loads(srv.requests[0].body)
    assert "response_format" not in body
    assert mf.final(events).outputs == {"name": "Shipping", "label": "CLASS 2"}
