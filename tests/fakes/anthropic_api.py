"""A fake of Anthropic's Messages API stream (`POST /v1/messages`), as
api.anthropic.com sends it: `message_start`, `content_block_start` and `ping`
before the first `content_block_delta`, `message_delta` (stop reason, usage)
and `message_stop` at the end; errors as `{"type": "error", "error": {...}}`."""

from __future__ import annotations

from typing import Any

from tests.fakes.dialects import Dialect
from tests.fakes.llm_server import Conn


class AnthropicDialect(Dialect):
    kind = "anthropic"

    def start(self, conn: Conn) -> None:
        super().start(conn)
        message = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-fake",
            "stop_reason": None,
            "usage": {"input_tokens": 5, "output_tokens": 1},
        }
        self.event(conn, "message_start", {"type": "message_start", "message": message})
        block = {"type": "text", "text": ""}
        start = {"type": "content_block_start", "index": 0, "content_block": block}
        self.event(conn, "content_block_start", start)
        self.keepalive(conn)

    def keepalive(self, conn: Conn) -> None:
        self.event(conn, "ping", {"type": "ping"})

    def token(self, conn: Conn, text: str) -> None:
        delta = {"type": "text_delta", "text": text}
        self.event(conn, "content_block_delta", _delta(0, delta))

    def reasoning(self, conn: Conn, text: str) -> None:
        self.event(
            conn, "content_block_delta", _delta(0, {"type": "thinking_delta", "thinking": text})
        )

    def tool_call(self, conn: Conn, index: int, name: str, pieces: list[str]) -> None:
        block = {"type": "tool_use", "id": f"toolu_{index}", "name": name, "input": {}}
        start = {"type": "content_block_start", "index": index, "content_block": block}
        self.event(conn, "content_block_start", start)
        for piece in pieces:
            delta = {"type": "input_json_delta", "partial_json": piece}
            self.event(conn, "content_block_delta", _delta(index, delta))
        self.event(conn, "content_block_stop", {"type": "content_block_stop", "index": index})

    def finish(self, conn: Conn, tokens: int, reason: str = "end_turn") -> None:
        self.event(conn, "content_block_stop", {"type": "content_block_stop", "index": 0})
        delta = {"stop_reason": reason, "stop_sequence": None}
        doc = {"type": "message_delta", "delta": delta, "usage": {"output_tokens": tokens}}
        self.event(conn, "message_delta", doc)
        self.event(conn, "message_stop", {"type": "message_stop"})

    def error(self, conn: Conn, message: str, kind: str = "overloaded_error") -> None:
        self.event(conn, "error", self.error_body(529, message, kind))

    def error_body(self, status: int, message: str, kind: str = "") -> Any:
        kind = kind or {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            429: "rate_limit_error",
            529: "overloaded_error",
        }.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}


def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


ANTHROPIC = AnthropicDialect()
