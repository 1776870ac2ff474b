"""`kind: ollama`: what only Ollama's native `/api/chat` does (the shared
scenarios are in test_wire_protocols.py): the request, whole tool calls,
`done_reason`, images by URL refused, the line cap on NDJSON."""

from __future__ import annotations

import json

import pytest
from firstgate.plugin_daemon_client import LLMClient
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.invoke import assemble_tool_calls
from firstgate.plugin_daemon_client.protocols import ToolSpec

from tests.fakes import dialects as sc
from tests.fakes.llm_server import Conn, FakeLLMServer
from tests.fakes.ollama_api import OLLAMA as D

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
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


def run(srv: FakeLLMServer, messages: list = MESSAGES, **kwargs: object) -> list:
    client = LLMClient("ollama", srv.root_url)
    return list(client.invoke_llm("llama3", messages, **kwargs))  # type: ignore[arg-type]


def test_the_request_is_an_ollama_chat_request() -> None:
    with FakeLLMServer([sc.reply(D, ["ok"])]) as srv:
        params = {"max_tokens": 9, "temperature": 0.1, "keep_alive": "5m", "bogus": 1}
        run(srv, parameters=params, stop=["\n"], tools=[TOOL], json_schema=SCHEMA)
        (req,) = srv.requests
    assert req.path == "/api/chat" and "authorization" not in req.headers
    body = req.json()
    assert body["stream"] is True and body["model"] == "llama3" and body["keep_alive"] == "5m"
    assert body["options"] == {"num_predict": 9, "temperature": 0.1, "stop": ["\n"]}
    assert body["format"] == SCHEMA and "bogus" not in body
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Look:", "images": [PNG]},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "look", "arguments": {"x": 1}}}]},
        {"role": "tool", "content": "a cat"},
    ]  # fmt: skip
    assert body["tools"][0]["function"]["name"] == "look"


def test_tool_calls_arrive_whole_each_with_an_id() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.tool_call(conn, "look", {"x": 2})
        D.tool_call(conn, "look", {"x": 3})
        D.finish(conn, 2)
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        chunks = run(srv, tools=[TOOL])
    calls = assemble_tool_calls([d for c in chunks for d in c.tool_calls])
    assert [(c.id, json.loads(c.arguments)) for c in calls] == [
        ("call_1", {"x": 2}),
        ("call_2", {"x": 3}),
    ]
    assert chunks[-1].finish_reason == "tool_calls"


def test_done_reason_length_is_the_finish_reason() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.token(conn, "cut")
        D.finish(conn, 1, reason="length")
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        assert run(srv)[-1].finish_reason == "length"


def test_an_image_by_url_is_refused_before_sending() -> None:
    url_image = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}],
        }
    ]
    with FakeLLMServer([sc.reply(D, ["x"])]) as srv:
        with pytest.raises(E.BadRequestError, match="bytes"):
            run(srv, url_image)
        assert srv.requests == []


def test_a_model_that_is_not_there_is_a_bad_request() -> None:
    with FakeLLMServer([sc.status(D, 404, "model 'llama9' not found")]) as srv:
        with pytest.raises(E.BadRequestError, match="llama9") as info:
            run(srv)
    assert not info.value.transient


def test_a_line_split_across_reads_and_a_last_line_without_newline() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        conn.send(b'{"message": {"role": "assistant", "content": "sp')
        conn.sleep(0.05)
        conn.send(b'lit"}, "done": false}\n')
        conn.send(b'{"done": true, "done_reason": "stop", "eval_count": 1}')
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        chunks = run(srv)
    assert "".join(c.text for c in chunks) == "split" and chunks[-1].finish_reason == "stop"


def test_a_last_line_cut_mid_object_is_truncated() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        D.token(conn, "a")
        conn.send(b'{"message": {"content": "b')
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        with pytest.raises(E.TruncatedBodyError) as info:
            run(srv)
    assert info.value.partial_text == "a"


def test_the_line_cap_holds_for_an_unfinished_line() -> None:
    def scenario(conn: Conn) -> None:
        D.start(conn)
        conn.send(b"x" * 5000)
        conn.sleep(5)
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        client = LLMClient("ollama", srv.root_url, max_line_bytes=4096)
        with pytest.raises(E.FrameTooLargeError, match="4096"):
            list(client.invoke_llm("m", MESSAGES))
