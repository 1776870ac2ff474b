"""Scenarios shared by the fakes of the wire protocols that name their own end
(Anthropic, the Responses API, Gemini, Ollama), on `llm_server.FakeLLMServer`'s
real loopback sockets.

A `Dialect` says how one protocol spells each step on the wire; the scenarios
here are written once against it: its lifecycle events before the first token,
its keep-alive, tokens, the end marker, an error event, junk and a huge event.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from tests.fakes.llm_server import Conn, Scenario, http_error


class Dialect:
    """One protocol's spelling of each step (subclasses fill these in)."""

    kind = ""
    media_type = "text/event-stream"
    finish_reason = "stop"  # what the client reports for the fake's normal end

    def base_url(self, root_url: str) -> str:
        return root_url

    def event(self, conn: Conn, name: str, doc: Any) -> None:
        """One SSE event named `name` (an NDJSON dialect overrides this)."""
        conn.send(f"event: {name}\ndata: ".encode() + json.dumps(doc).encode() + b"\n\n")

    def start(self, conn: Conn) -> None:
        """Headers and the lifecycle events that come before the first token."""
        conn.send_headers(content_type=self.media_type)

    def keepalive(self, conn: Conn) -> None:
        raise NotImplementedError

    def token(self, conn: Conn, text: str) -> None:
        raise NotImplementedError

    def reasoning(self, conn: Conn, text: str) -> None:
        raise NotImplementedError

    def finish(self, conn: Conn, tokens: int) -> None:
        """The usage (5 prompt tokens, `tokens` completion tokens) and the end marker."""
        raise NotImplementedError

    def error(self, conn: Conn, message: str) -> None:
        """An error event mid-stream (transient where the protocol says so)."""
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> Any:
        raise NotImplementedError

    def unknown(self, conn: Conn) -> None:
        """An event of a type the protocol does not define, holding text."""
        self.event(conn, "firstgate_unknown", {"type": "firstgate.unknown", "text": "NOPE"})

    def malformed(self, conn: Conn) -> None:
        """A payload that is not JSON."""
        conn.send(b'data: {"type": "content_block_delta", "delta": {"text": "NOPE"\n\n')

    def big_event(self, conn: Conn, size: int) -> None:
        """One event of `size` bytes, in one write."""
        conn.send(b"data: " + b"x" * size + b"\n\n")


def reply(d: Dialect, texts: Sequence[str], *, keepalives: int = 2, think: str = "") -> Scenario:
    """Lifecycle events and keep-alives first, then the tokens and the end."""

    def run(conn: Conn) -> None:
        d.start(conn)
        for _ in range(keepalives):
            d.keepalive(conn)
        if think:
            d.reasoning(conn, think)
        for text in texts:
            d.token(conn, text)
        d.finish(conn, len(texts))
        conn.end()

    return run


def keepalives(
    d: Dialect, interval: float, duration: float = 30.0, then: Sequence[str] = ()
) -> Scenario:
    """Only lifecycle events and keep-alives for `duration`, then maybe a reply."""

    def run(conn: Conn) -> None:
        d.start(conn)
        end = time.monotonic() + duration
        while time.monotonic() < end:
            d.keepalive(conn)
            conn.sleep(interval)
        for text in then:
            d.token(conn, text)
        if then:
            d.finish(conn, len(then))
        conn.end()

    return run


def silence_then(d: Dialect, seconds: float, texts: Sequence[str]) -> Scenario:
    """Nothing at all (not even headers) for `seconds`: Ollama loading a model."""

    def run(conn: Conn) -> None:
        conn.sleep(seconds)
        reply(d, texts, keepalives=0)(conn)

    return run


def truncated(d: Dialect, tokens: int) -> Scenario:
    """Tokens, then a clean close before the end marker."""

    def run(conn: Conn) -> None:
        d.start(conn)
        for i in range(tokens):
            d.token(conn, f"t{i} ")
        conn.end()

    return run


def error_mid_stream(d: Dialect, message: str, tokens: int = 1) -> Scenario:
    def run(conn: Conn) -> None:
        d.start(conn)
        for i in range(tokens):
            d.token(conn, f"t{i} ")
        d.error(conn, message)
        conn.end()

    return run


def junk_then_reply(d: Dialect, texts: Sequence[str]) -> Scenario:
    """Malformed payloads and unknown event types around the tokens."""

    def run(conn: Conn) -> None:
        d.start(conn)
        d.malformed(conn)
        d.unknown(conn)
        for text in texts:
            d.token(conn, text)
            d.unknown(conn)
        d.malformed(conn)
        d.finish(conn, len(texts))
        conn.end()

    return run


def junk_forever(d: Dialect, interval: float, duration: float = 30.0) -> Scenario:
    """Only malformed and unknown events: none of it is a first token."""

    def run(conn: Conn) -> None:
        d.start(conn)
        end = time.monotonic() + duration
        while time.monotonic() < end:
            d.malformed(conn)
            d.unknown(conn)
            conn.sleep(interval)
        conn.end()

    return run


def big_event(d: Dialect, size: int) -> Scenario:
    def run(conn: Conn) -> None:
        d.start(conn)
        d.token(conn, "ok ")
        d.big_event(conn, size)
        conn.end()

    return run


def status(d: Dialect, code: int, message: str) -> Scenario:
    return http_error(code, body=d.error_body(code, message))


class _Capture:
    """A stand-in `Conn` that keeps what a dialect would send."""

    framing = "close"
    headers_sent = True

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def send_headers(self, *args: object, **kwargs: object) -> None:
        pass


def wire_bytes(step: Any) -> bytes:
    """The bytes `step(conn)` sends (to put several steps in one write)."""
    conn = _Capture()
    step(conn)
    return b"".join(conn.sent)


def stream_of(d: Dialect, frames: int, text: str = "tok") -> bytes:
    """The whole body of a reply of `frames` tokens (for the throughput bench)."""

    def steps(conn: Any) -> None:
        d.start(conn)
        for _ in range(frames):
            d.token(conn, text)
        d.finish(conn, frames)

    return wire_bytes(steps)
