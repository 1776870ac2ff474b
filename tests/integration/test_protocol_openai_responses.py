"""`kind: openai-responses`: what only OpenAI's Responses API does (the shared
scenarios are in test_wire_protocols.py): the request, function calls, the
schema as `text.format`, `response.incomplete`, `error` and `response.failed`."""

from __future__ import annotations

import json

import pytest
from firstgate.plugin_daemon_client import LLMClient
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.invoke import assemble_tool_calls
from firstgate.plugin_daemon_client.protocols import ToolSpec

from tests.fakes import dialects as sc
from tests.fakes.llm_server import Conn, FakeLLMServer
from tests.fakes.responses_api import RESPONSES as D

SECRET = "sk-firstgate-PLANTED-7f3a9c"
IMAGE = "data:image/png;base64,iVBORw0KGgo="
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": IMAGE}},
    ]},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "look", "arguments": '{"x": 1}'}}
    ]},
    {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
]  # fmt: skip
TOOL = ToolSpec(
    "look", "Look closer.", {"type": "object", "properties": {"x": {"type": "integer"}}}
)
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


def run(srv: FakeLLMServer, **kwargs: object) -> list:
    client = LLMClient("openai-responses", D.base_url(srv.root_url), api_key=SECRET)
    return list(client.invoke_llm("gpt-x", MESSAGES, **kwargs))  # type: ignore[arg-type]


def test_the_request_is_a_responses_api_request() -> None:
    with FakeLLMServer([sc.reply(D, ["ok"])]) as srv:
        run(srv, parameters={"max_tokens": 9, "temperature": 0.1}, tools=[TOOL], tool_choice="auto")
        run(srv, json_schema=SCHEMA)
        first, second = srv.requests
    assert first.path == "/v1/responses" and first.headers["authorization"] == f"Bearer {SECRET}"
    body = first.json()
    assert body["stream"] is True and body["store"] is False and body["model"] == "gpt-x"
    assert body["instructions"] == "Be brief." and body["max_output_tokens"] == 9
    assert body["temperature"] == 0.1 and "max_tokens" not in body
    assert body["input"] == [
        {"role": "user", "content": [
            {"type": "input_text", "text": "Look:"},
            {"type": "input_image", "image_url": IMAGE},
        ]},
        {"type": "function_call", "call_id": "c1", "name": "look", "arguments": '{"x": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "a cat"},
    ]  # fmt: skip
    assert body["tools"] == [
        {
            "type": "function",
            "name": "look",
            "description": "Look closer.",
            "parameters": TOOL.parameters,
        }
    ]
    assert body["tool_choice"] == "auto"
    fmt = second.json()["text"]["format"]
    assert fmt == {"type": "json_schema", "name": "answer", "schema": SCHEMA}


def test_function_call_pieces_are_content_and_assemble() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.tool_call(conn, 1, "look", ['{"x"', ": 2}"])
        D.tool_call(conn, 2, "noargs", [])
        D.finish(conn, 3)
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        chunks = run(srv, tools=[TOOL])
    calls = assemble_tool_calls([d for c in chunks for d in c.tool_calls])
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_1", "look", {"x": 2}),
        ("call_2", "noargs", {}),
    ]
    assert chunks[-1].finish_reason == "tool_calls"


def test_incomplete_at_max_output_tokens_is_a_reply_cut_at_its_length() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.token(conn, "cut")
        D.finish(conn, 1, kind="response.incomplete", reason="max_output_tokens")
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        chunks = run(srv)
    assert "".join(c.text for c in chunks) == "cut" and chunks[-1].finish_reason == "length"


def test_incomplete_for_a_content_filter_is_blocked() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.finish(conn, 0, kind="response.incomplete", reason="content_filter")
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        with pytest.raises(E.ContentBlockedError, match="content_filter") as info:
            run(srv)
    assert not info.value.transient


@pytest.mark.parametrize(
    ("event", "cls", "transient"),
    [
        ({"type": "error", "code": "rate_limit_exceeded", "message": "m"}, E.RateLimitError, True),
        ({"type": "error", "code": "invalid_prompt", "message": "m"}, E.BadRequestError, False),
        ({"type": "error", "code": None, "message": "m"}, E.InvokeServerError, True),
        (
            {
                "type": "response.failed",
                "response": {"error": {"code": "server_error", "message": "m"}},
            },
            E.InvokeServerError,
            True,
        ),
        (
            {
                "type": "response.failed",
                "response": {"error": {"code": "invalid_image", "message": "m"}},
            },
            E.BadRequestError,
            False,
        ),
    ],
)
def test_error_events_are_typed_by_code(event: dict, cls: type, transient: bool) -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.event(conn, event["type"], event)
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        with pytest.raises(E.InvokeError) as info:
            run(srv)
    assert type(info.value) is cls and info.value.transient is transient
