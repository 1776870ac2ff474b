"""Scenarios for `FakeLLMServer` that answer like a model does, in the form the
request asked for: a JSON body when an OpenAI request says `stream: false`,
else a stream; tool calls as OpenAI streams them (id and name first, then the
arguments in pieces under one index) or as the plugin daemon sends them (whole).

`answer(...)` is one reply; `script(...)` picks the reply from what the
request contains, for conversations (an agent's rounds, a classifier and an
extractor sharing one server).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.llm_server import Conn, RecordedRequest, Scenario


@dataclass(frozen=True)
class Call:
    """A tool call the fake model makes."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = ""


def wants_stream(request: RecordedRequest) -> bool:
    if "/dispatch/llm/invoke" in request.path:
        return True  # the daemon always streams
    try:
        return bool(json.loads(request.body).get("stream", True))
    except ValueError:
        return True


def _pieces(text: str, count: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(count, 1)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _call_id(call: Call, number: int) -> str:
    return call.id or f"call_{number}"


def _json_body(conn: Conn, text: str, calls: Sequence[Call], usage: dict[str, int]) -> None:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": _call_id(call, n),
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for n, call in enumerate(calls, 1)
        ]
    doc = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "fake",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": usage,
    }
    conn.send_headers(content_type="application/json")
    conn.send(json.dumps(doc).encode())
    conn.end()


def _openai_delta(conn: Conn, delta: dict[str, Any], finish: str | None = None) -> None:
    conn.frame(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "model": "fake",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def _stream(conn: Conn, text: str, calls: Sequence[Call], pieces: int, interval: float) -> None:
    conn.send_headers()
    conn.role()
    for piece in _pieces(text, pieces):
        if interval:
            conn.sleep(interval)
        conn.token(piece)
    for n, call in enumerate(calls, 1):
        arguments = json.dumps(call.arguments)
        if conn.protocol == "daemon":
            whole = {
                "id": _call_id(call, n),
                "type": "function",
                "function": {"name": call.name, "arguments": arguments},
            }
            conn.frame(
                {
                    "code": 0,
                    "message": "",
                    "data": {
                        "model": "fake",
                        "delta": {
                            "index": 0,
                            "message": {"role": "assistant", "content": "", "tool_calls": [whole]},
                        },
                    },
                }
            )
            continue
        head = {"index": n - 1, "id": _call_id(call, n), "type": "function"}
        _openai_delta(
            conn, {"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]}
        )
        for piece in _pieces(arguments, pieces):
            if interval:
                conn.sleep(interval)
            _openai_delta(
                conn, {"tool_calls": [{"index": n - 1, "function": {"arguments": piece}}]}
            )
    conn.finish("tool_calls" if calls else "stop", tokens=max(1, len(text) // 4))
    conn.end()


def answer(
    text: str = "",
    calls: Sequence[Call] = (),
    *,
    delay: float = 0.0,
    pieces: int = 3,
    interval: float = 0.0,
) -> Scenario:
    """One reply, after `delay` seconds of silence (no headers either)."""

    def run(conn: Conn) -> None:
        if delay:
            conn.sleep(delay)
        usage = {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}
        if wants_stream(conn.request):
            _stream(conn, text, calls, pieces, interval)
        else:
            _json_body(conn, text, calls, usage)

    return run


def body_then_trickle(first: bytes, interval: float, count: int) -> Scenario:
    """A non-streamed reply whose body begins at once and then trickles one
    byte every `interval` seconds (`count` bytes of padding before the JSON)."""

    def run(conn: Conn) -> None:
        conn.send_headers(content_type="application/json")
        conn.send(first)
        for _ in range(count):
            conn.sleep(interval)
            conn.send(b" ")
        doc = {"choices": [{"index": 0, "message": {"content": "late"}, "finish_reason": "stop"}]}
        conn.send(json.dumps(doc).encode()[1:])  # `first` was the opening brace
        conn.end()

    return run


def headers_then_body_after(seconds: float, text: str = "late") -> Scenario:
    """Headers at once, then the JSON body only after `seconds`."""

    def run(conn: Conn) -> None:
        conn.send_headers(content_type="application/json")
        conn.sleep(seconds)
        doc = {"choices": [{"index": 0, "message": {"content": text}, "finish_reason": "stop"}]}
        conn.send(json.dumps(doc).encode())
        conn.end()

    return run


def request_text(request: RecordedRequest) -> str:
    """Everything the request asks the model, as one text (messages, tools)."""
    try:
        doc = json.loads(request.body)
    except ValueError:
        return ""
    data = doc.get("data", doc)  # the daemon wraps its call in `data`
    return json.dumps(
        [data.get("messages") or data.get("prompt_messages"), data.get("tools")],
        ensure_ascii=False,
    )


def script(rules: Sequence[tuple[Callable[[RecordedRequest], bool], Scenario]]) -> Scenario:
    """The scenario of the first rule whose test accepts the request."""

    def run(conn: Conn) -> None:
        for test, scenario in rules:
            if test(conn.request):
                scenario(conn)
                return
        raise AssertionError(f"no scripted answer for {request_text(conn.request)[:300]}")

    return run


def mentions(*needles: str) -> Callable[[RecordedRequest], bool]:
    def test(request: RecordedRequest) -> bool:
        text = request_text(request)
        return all(needle in text for needle in needles)

    return test


def has_tool_results(count: int) -> Callable[[RecordedRequest], bool]:
    """The request carries exactly `count` tool results (an agent's round number - 1)."""

    def test(request: RecordedRequest) -> bool:
        doc = json.loads(request.body)
        messages = doc.get("messages") or doc.get("data", {}).get("prompt_messages") or []
        return sum(1 for m in messages if m.get("role") == "tool") == count

    return test


def in_turn(*scenarios: Scenario) -> Scenario:
    """The N-th model request gets the N-th scenario (the last one repeats);
    a probe's GET is not a model request and is answered 404."""
    lock = threading.Lock()
    served = [0]

    def run(conn: Conn) -> None:
        if conn.request.method != "POST":
            conn.send_headers(status=404, content_type="text/plain")
            conn.end()
            return
        with lock:
            index = min(served[0], len(scenarios) - 1)
            served[0] += 1
        scenarios[index](conn)

    return run
