"""The LLM node's structured output: a workflow's schema is checked at load,
a model's answer is read tolerantly and validated, and both are treated as
untrusted (no remote `$ref`, a time limit on every pattern match)."""

from __future__ import annotations

import http.server
import threading
from typing import Any

import pytest
from firstgate.nodes import llm
from firstgate.nodes.llm.structured_output import (
    StructuredOutputError,
    parse_and_validate,
    schema_problem,
)
from pydantic import ValidationError

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z]"},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age"],
}


def data(**extra: Any) -> llm.Data:
    return llm.Data.model_validate(
        {
            "type": "llm",
            "model": {"provider": "p", "name": "m"},
            "prompt_template": [{"role": "user", "text": "hi"}],
            **extra,
        }
    )


def test_a_matching_answer_is_the_structured_output() -> None:
    answer = 'Here you go: {"name": "Ada", "age": 36, "tags": ["maths"]}'
    assert parse_and_validate(PERSON, answer) == {"name": "Ada", "age": 36, "tags": ["maths"]}


@pytest.mark.parametrize(
    ("answer", "path"),
    [
        ('{"name": "ada", "age": 3}', "$.name"),
        ('{"name": "Ada", "age": -1}', "$.age"),
        ('{"name": "Ada"}', "$"),
        ('{"name": "Ada", "age": 3, "tags": [1]}', "$.tags[0]"),
    ],
    ids=["pattern", "minimum", "required", "item-type"],
)
def test_a_mismatch_is_a_typed_error_naming_where(answer: str, path: str) -> None:
    with pytest.raises(StructuredOutputError) as caught:
        parse_and_validate(PERSON, answer)
    assert caught.value.message_key == "errors.llm.structuredMismatch"
    assert caught.value.params["path"] == path


def test_an_answer_without_json_is_a_typed_error() -> None:
    with pytest.raises(StructuredOutputError) as caught:
        parse_and_validate(PERSON, "Ada is 36.")
    assert caught.value.message_key == "errors.llm.structuredNoJson"


def test_a_catastrophic_pattern_is_a_mismatch_in_bounded_time() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(x+x+)+y$"}}}
    with pytest.raises(StructuredOutputError) as caught:
        parse_and_validate(schema, '{"s": "' + "x" * 5000 + '"}')
    assert caught.value.message_key == "errors.llm.structuredPatternTimeout"


def test_a_catastrophic_property_pattern_is_bounded_too() -> None:
    schema = {"type": "object", "patternProperties": {"^(x+x+)+y$": {"type": "string"}}}
    with pytest.raises(StructuredOutputError):
        parse_and_validate(schema, '{"' + "x" * 5000 + '": "v"}')


def test_a_remote_ref_is_never_fetched() -> None:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type": "string"}')

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/schema.json"
        schema = {"type": "object", "properties": {"a": {"$ref": url}}}
        with pytest.raises(StructuredOutputError) as caught:
            parse_and_validate(schema, '{"a": "x"}')
    finally:
        server.shutdown()
    assert caught.value.message_key == "errors.llm.structuredUnresolvable"
    assert hits == []


def test_a_self_referencing_schema_fails_instead_of_recursing_forever() -> None:
    with pytest.raises(StructuredOutputError):
        parse_and_validate({"$ref": "#"}, '{"a": 1}')


def test_the_node_declares_structured_output_only_when_on() -> None:
    on = data(structured_output_enabled=True, structured_output={"schema": PERSON})
    assert "structured_output" in llm.output_names(on) and on.output_schema == PERSON
    off = data(structured_output={"schema": PERSON})
    assert "structured_output" not in llm.output_names(off) and off.output_schema is None
    # graphon's name for the switch
    assert data(
        structured_output_switch_on=True, structured_output={"schema": PERSON}
    ).output_schema


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"structured_output_enabled": True}, "dsl.llm.structuredNoSchema"),
        (
            {"structured_output_enabled": True, "structured_output": {"schema": {"type": 5}}},
            "dsl.llm.structuredSchema",
        ),
        (
            {
                "structured_output_enabled": True,
                "structured_output": {"schema": {"type": "string", "pattern": "(unclosed"}},
            },
            "dsl.llm.structuredSchema",
        ),
    ],
    ids=["no-schema", "not-json-schema", "bad-pattern"],
)
def test_an_unusable_schema_is_refused_at_load(extra: dict[str, Any], key: str) -> None:
    with pytest.raises(ValidationError) as caught:
        data(**extra)
    assert key in {e["type"] for e in caught.value.errors()}


def test_schema_problem_accepts_a_good_schema() -> None:
    assert schema_problem(PERSON) is None
