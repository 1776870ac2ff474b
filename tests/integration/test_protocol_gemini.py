"""`kind: gemini`: what only Gemini's streamGenerateContent does (the shared
scenarios are in test_wire_protocols.py): the request, its schema subset (a
schema it cannot express is a load-time problem naming route and node), safety
blocks, finish reasons, whole function calls, its error objects."""

from __future__ import annotations

import json

import pytest
from firstgate.common.problems import DslError
from firstgate.plugin_daemon_client import LLMClient
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.protocols import ToolSpec
from firstgate.plugin_daemon_client.protocols.gemini import Gemini, gemini_schema
from firstgate.runtime import load_workflow
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute

from tests import model_flows as mf
from tests.fakes import dialects as sc
from tests.fakes.gemini_api import GEMINI as D
from tests.fakes.llm_server import Conn, FakeLLMServer, Scenario

SECRET = "AIza-firstgate-PLANTED-7f3a9c"
PNG = "iVBORw0KGgo="
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "look", "arguments": '{"x": 1}'}}
    ]},
    {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
]  # fmt: skip
TOOL = ToolSpec(
    "look", "Look closer.", {"type": "object", "properties": {"x": {"type": "integer"}}}
)
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": ["string", "null"]}, "b": {"const": "x"}},
    "required": ["a"],
    "additionalProperties": False,
    "$schema": "http://json-schema.org/draft-07/schema#",
}
REF_SCHEMA = {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {}}}


def run(srv: FakeLLMServer, **kwargs: object) -> list:
    client = LLMClient("gemini", srv.root_url, api_key=SECRET)
    return list(client.invoke_llm("gemini-2.5-flash", MESSAGES, **kwargs))  # type: ignore[arg-type]


def test_the_request_is_a_stream_generate_content_request() -> None:
    with FakeLLMServer([sc.reply(D, ["ok"])]) as srv:
        params = {"max_tokens": 9, "temperature": 0.1, "top_p": 0.5, "bogus": 1}
        run(
            srv,
            parameters=params,
            stop=["\n"],
            tools=[TOOL],
            tool_choice="required",
            json_schema=SCHEMA,
        )
        (req,) = srv.requests
    assert req.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert req.headers["x-goog-api-key"] == SECRET and "authorization" not in req.headers
    body = req.json()
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Look:"}, {"inlineData": {"mimeType": "image/png", "data": PNG}}]},
        {"role": "model", "parts": [{"functionCall": {"name": "look", "args": {"x": 1}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "look", "response": {"content": "a cat"}}}]},
    ]  # fmt: skip
    config = body["generationConfig"]
    assert config["maxOutputTokens"] == 9 and config["topP"] == 0.5 and "bogus" not in config
    assert config["stopSequences"] == ["\n"] and config["responseMimeType"] == "application/json"
    assert config["responseSchema"] == {
        "type": "object",
        "properties": {"a": {"type": "string", "nullable": True}, "b": {"enum": ["x"]}},
        "required": ["a"],
    }
    assert body["tools"] == [{"functionDeclarations": [{"name": "look", "description": "Look closer.", "parameters": TOOL.parameters}]}]  # fmt: skip
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (REF_SCHEMA, "$.properties.a.$ref"),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, "$.oneOf"),
        ({"type": ["string", "integer"]}, "$.type"),
        ({"type": "array", "items": [{"type": "string"}]}, "$.items"),
        ({"type": "object", "additionalProperties": {"type": "string"}}, "$.additionalProperties"),
        ({"enum": [1, 2]}, "$.enum"),
    ],
)
def test_what_the_schema_subset_cannot_say_is_named(schema: dict, where: str) -> None:
    problem = Gemini.schema_problem(schema)
    assert problem is not None and where in problem
    with FakeLLMServer([sc.reply(D, ["x"])]) as srv:  # a caller without the load check
        with pytest.raises(E.BadRequestError, match="cannot express"):
            run(srv, json_schema=schema)
        assert srv.requests == []


def test_what_it_can_say_passes() -> None:
    assert Gemini.schema_problem(SCHEMA) is None
    nested = {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}
    assert gemini_schema(nested) == nested


def _structured_flow(schema: dict) -> dict:
    data = {**mf.structured_llm_data(), "structured_output": {"schema": schema}}
    return mf.workflow([{"id": "n", "data": data}], [("start", "n", "source")])


def test_a_schema_the_route_cannot_express_is_a_load_time_problem() -> None:
    settings = RuntimeSettings(
        providers={
            "primary": ProviderRoute(
                kind="openai-compatible", base_url="http://127.0.0.1:9/v1", fallbacks=["gem"]
            ),
            "gem": ProviderRoute(
                kind="gemini", base_url="https://generativelanguage.googleapis.com"
            ),
        }
    )
    with pytest.raises(DslError) as info:
        load_workflow(_structured_flow(REF_SCHEMA), settings=settings)
    (problem,) = info.value.problems
    text = problem.render()
    assert problem.message_key == "dsl.models.schemaUnsupported" and problem.node.id == "n"
    assert "gem" in text and "gemini" in text and "$ref" in text and "Answer" in text
    assert problem.render("ja-JP") != text
    # The route that puts the schema in the prompt, and no settings at all, load.
    prompt_only = settings.model_copy(deep=True)
    prompt_only.providers["gem"] = ProviderRoute(
        kind="gemini", base_url="https://generativelanguage.googleapis.com", json_schema=False
    )
    load_workflow(_structured_flow(REF_SCHEMA), settings=prompt_only)
    load_workflow(_structured_flow(REF_SCHEMA))
    load_workflow(_structured_flow(SCHEMA), settings=settings)


def _ending(reason: str) -> Scenario:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.token(conn, "partial ")
        D.finish(conn, 1, reason=reason)
        conn.end()

    return scenario


@pytest.mark.parametrize("reason", ["SAFETY", "RECITATION", "PROHIBITED_CONTENT"])
def test_a_blocked_answer_is_a_non_transient_blocked_error(reason: str) -> None:
    with FakeLLMServer([_ending(reason)]) as srv:
        with pytest.raises(E.ContentBlockedError, match=reason) as info:
            run(srv)
    assert not info.value.transient and "safety" in str(info.value)
    assert info.value.partial_text == "partial "


def test_a_blocked_prompt_is_a_non_transient_blocked_error() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.chunk(conn, {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {}})
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        with pytest.raises(E.ContentBlockedError, match="prompt: SAFETY") as info:
            run(srv)
    assert not info.value.transient


def test_max_tokens_is_a_reply_cut_at_its_length() -> None:
    with FakeLLMServer([_ending("MAX_TOKENS")]) as srv:
        chunks = run(srv)
    assert "".join(c.text for c in chunks) == "partial " and chunks[-1].finish_reason == "length"


def test_function_calls_arrive_whole() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.tool_call(conn, "look", {"x": 2})
        D.finish(conn, 1)
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        chunks = run(srv, tools=[TOOL])
    (call,) = [d for c in chunks for d in c.tool_calls]
    assert (call.index, call.id, call.name, json.loads(call.arguments)) == (
        None,
        "call_1",
        "look",
        {"x": 2},
    )
    assert chunks[-1].finish_reason == "tool_calls"


def test_a_bad_key_is_an_authorization_error_and_never_printed() -> None:
    body = {"error": {"code": 400, "message": f"API key not valid: {SECRET}", "status": "INVALID_ARGUMENT",
                      "details": [{"reason": "API_KEY_INVALID"}]}}  # fmt: skip
    with FakeLLMServer([sc.http_error(400, body=body)]) as srv:
        with pytest.raises(E.AuthorizationError) as info:
            run(srv)
    assert not info.value.transient and SECRET not in str(info.value)


def test_resource_exhausted_mid_stream_is_a_rate_limit() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.chunk(conn, D.error_body(429, "quota"))
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        with pytest.raises(E.RateLimitError, match="quota") as info:
            run(srv)
    assert info.value.transient
