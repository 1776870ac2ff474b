"""The LLM node with structured output, in whole workflows against a fake
model server: the schema travels as the response format (or in the prompt
where the route cannot take one), the text still streams, and the parsed
object is `structured_output`; a mismatch is a typed error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from firstgate.runtime.execution import events as ev

from tests import model_flows as mf
from tests.fakes import llm_server as fake
from tests.fakes import model_answers as ma


def flow(**extra: Any) -> dict[str, Any]:
    data = {**mf.structured_llm_data(), "error_strategy": "fail-branch", **extra}
    return mf.workflow(
        [
            {"id": "n", "data": data},
            mf.end("ok", city=["n", "structured_output"], text=["n", "text"]),
            mf.end("failed", error=["n", "error_type"], message=["n", "error_message"]),
        ],
        [("start", "n", "source"), ("n", "ok", "source"), ("n", "failed", "fail-branch")],
    )


def run(tmp_path: Path, answer: str, **route: Any) -> tuple[list[ev.Event], dict[str, Any]]:
    with fake.FakeLLMServer(ma.in_turn(ma.answer(answer, pieces=4))) as srv:
        events = mf.run(tmp_path, flow(), mf.routes(srv, **route))
        body = json.loads(srv.requests[0].body)
    return events, body


def test_the_schema_is_the_response_format_and_the_object_the_output(tmp_path: Path) -> None:
    events, body = run(tmp_path, '{"city": "Lyon"}')
    assert body["response_format"]["json_schema"]["schema"] == mf.CITY_SCHEMA
    assert body["stream"] is True
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {"city": {"city": "Lyon"}, "text": '{"city": "Lyon"}'}
    # The text still streams: its first content token is reported as it arrives.
    assert [e.node_id for e in mf.of(events, ev.NodeFirstToken)] == ["n"]


def test_a_route_without_schema_support_gets_it_in_the_system_prompt(tmp_path: Path) -> None:
    events, body = run(tmp_path, '```json\n{"city": "Lyon"}\n```', json_schema=False)
    assert "response_format" not in body
    system = body["messages"][0]
    assert system["role"] == "system" and json.dumps(mf.CITY_SCHEMA) in system["content"]
    assert mf.final(events).outputs["city"] == {"city": "Lyon"}


def test_an_answer_that_does_not_match_is_a_typed_error(tmp_path: Path) -> None:
    events, _ = run(tmp_path, '{"town": "Lyon"}')
    (handled,) = mf.of(events, ev.NodeException)
    assert handled.error_type == "StructuredOutputError"
    assert mf.final(events).outputs["message"] == (
        "structured output: the answer does not match the schema at $: 'city' is a required property"
    )


def test_an_answer_without_json_is_a_typed_error(tmp_path: Path) -> None:
    events, _ = run(tmp_path, "Lyon, I think.")
    (handled,) = mf.of(events, ev.NodeException)
    assert handled.error_type == "StructuredOutputError"
    assert "no JSON object" in mf.final(events).outputs["message"]
