"""`kind: anthropic`: what only Anthropic's Messages API does (the shared
scenarios are in test_wire_protocols.py): the request, tool calls, a JSON
schema as a forced tool, `refusal`, 529 and the error types of its events."""

from __future__ import annotations

import json

import pytest
from firstgate.plugin_daemon_client import LLMClient
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.invoke import assemble_tool_calls
from firstgate.plugin_daemon_client.protocols import ToolSpec
from firstgate.plugin_daemon_client.protocols.anthropic import DEFAULT_MAX_TOKENS, FORCED_TOOL

from tests.fakes import dialects as sc
from tests.fakes.anthropic_api import ANTHROPIC as D
from tests.fakes.llm_server import Conn, FakeLLMServer

SECRET = "sk-firstgate-PLANTED-7f3a9c"
PNG = "iVBORw0KGgo="
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is this?"},
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


def client(srv: FakeLLMServer) -> LLMClient:
    return LLMClient("anthropic", srv.root_url, api_key=SECRET)


def run(srv: FakeLLMServer, **kwargs: object) -> list:
    return list(client(srv).invoke_llm("claude-x", MESSAGES, **kwargs))  # type: ignore[arg-type]


def test_the_request_is_a_messages_api_request() -> None:
    with FakeLLMServer([sc.reply(D, ["ok"])]) as srv:
        run(srv, parameters={"temperature": 0.2, "presence_penalty": 1}, stop=["\n"])
        run(srv, parameters={"max_tokens": 77}, tools=[TOOL], tool_choice="required")
        first, second = srv.requests
    assert first.path == "/v1/messages" and first.headers["x-api-key"] == SECRET
    assert first.headers["anthropic-version"] == "2023-06-01"
    body = first.json()
    assert body["stream"] is True and body["model"] == "claude-x" and body["system"] == "Be brief."
    # Unknown parameters are left out (the API refuses them); max_tokens is always set.
    assert body["temperature"] == 0.2 and "presence_penalty" not in body
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS and body["stop_sequences"] == ["\n"]
    user, assistant, tool_answer = body["messages"]  # consecutive user turns are merged
    assert user["role"] == "user" and [b["type"] for b in user["content"]] == [
        "text",
        "text",
        "image",
    ]
    assert user["content"][2]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": PNG,
    }
    assert assistant["content"] == [
        {"type": "tool_use", "id": "c1", "name": "look", "input": {"x": 1}}
    ]
    assert tool_answer["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "c1",
        "content": "a cat",
    }
    body = second.json()
    assert body["max_tokens"] == 77 and body["tool_choice"] == {"type": "any"}
    assert body["tools"] == [
        {"name": "look", "description": "Look closer.", "input_schema": TOOL.parameters}
    ]


def test_tool_call_pieces_are_content_and_assemble() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.tool_call(conn, 1, "look", ['{"x"', ": 2}"])
        D.tool_call(conn, 2, "noargs", [])
        D.finish(conn, 3, reason="tool_use")
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        chunks = run(srv, tools=[TOOL])
    calls = assemble_tool_calls([d for c in chunks for d in c.tool_calls])
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("toolu_1", "look", {"x": 2}),
        ("toolu_2", "noargs", {}),
    ]
    assert chunks[-1].finish_reason == "tool_calls"


def test_a_json_schema_is_a_forced_tool_whose_input_is_the_text() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}

    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.tool_call(conn, 1, FORCED_TOOL, ['{"a"', ": 1}"])
        D.finish(conn, 2, reason="tool_use")
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        chunks = run(srv, json_schema=schema)
        body = srv.requests[0].json()
    assert body["tool_choice"] == {"type": "tool", "name": FORCED_TOOL}
    assert body["tools"][-1]["input_schema"] == schema
    assert "".join(c.text for c in chunks) == '{"a": 1}'
    assert not [d for c in chunks for d in c.tool_calls]
    assert chunks[-1].finish_reason == "stop"


def test_a_schema_that_is_not_an_object_is_refused_before_sending() -> None:
    with FakeLLMServer([sc.reply(D, ["x"])]) as srv:
        with pytest.raises(E.BadRequestError, match="must be an object"):
            run(srv, json_schema={"type": "array"})
        assert srv.requests == []


def test_a_refusal_is_a_non_transient_blocked_error() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.token(conn, "I ")
        D.finish(conn, 1, reason="refusal")
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        with pytest.raises(E.ContentBlockedError) as info:
            run(srv)
    assert not info.value.transient and "safety" in str(info.value)
    assert info.value.partial_text == "I "


def test_529_overloaded_is_transient() -> None:
    with FakeLLMServer([sc.status(D, 529, "Overloaded")]) as srv:
        with pytest.raises(E.ServerUnavailableError, match="Overloaded") as info:
            run(srv)
    assert info.value.transient and info.value.status == 529


def test_529_without_a_body_is_still_overloaded() -> None:
    with FakeLLMServer([sc.http_error(529, body=b"")]) as srv:
        with pytest.raises(E.ServerUnavailableError) as info:
            run(srv)
    assert info.value.transient and info.value.status == 529


@pytest.mark.parametrize(
    ("kind", "cls", "transient"),
    [
        ("overloaded_error", E.ServerUnavailableError, True),
        ("rate_limit_error", E.RateLimitError, True),
        ("api_error", E.InvokeServerError, True),
        ("firstgate_unknown_error", E.InvokeServerError, True),
        ("invalid_request_error", E.BadRequestError, False),
    ],
)
def test_error_events_name_their_type(kind: str, cls: type, transient: bool) -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.error(conn, "nope", kind=kind)
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        with pytest.raises(E.InvokeError) as info:
            run(srv)
    assert type(info.value) is cls and info.value.transient is transient
