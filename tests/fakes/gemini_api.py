"""A fake of Gemini's `streamGenerateContent?alt=sse`, as
generativelanguage.googleapis.com sends it: each `data:` line a
`GenerateContentResponse`; before the first text, chunks with no content (an
empty part, metadata only) and SSE comments; the last chunk carries
`finishReason` and `usageMetadata`; blocks as `promptFeedback.blockReason` or
`finishReason: SAFETY`; errors as `{"error": {"code", "message", "status"}}`."""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.dialects import Dialect
from tests.fakes.llm_server import Conn


class GeminiDialect(Dialect):
    kind = "gemini"

    def chunk(self, conn: Conn, doc: Any) -> None:
        conn.send(b"data: " + json.dumps(doc).encode() + b"\r\n\r\n")

    def event(self, conn: Conn, name: str, doc: Any) -> None:
        self.chunk(conn, doc)

    def _candidate(self, parts: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        candidate = {"content": {"role": "model", "parts": parts}, "index": 0, **extra}
        return {"candidates": [candidate], "modelVersion": "gemini-fake", "responseId": "r1"}

    def start(self, conn: Conn) -> None:
        super().start(conn)
        self.chunk(conn, self._candidate([{"text": ""}]))

    def keepalive(self, conn: Conn) -> None:
        conn.send(b": keep-alive\n\n")
        self.chunk(conn, {"modelVersion": "gemini-fake", "usageMetadata": {"promptTokenCount": 5}})

    def token(self, conn: Conn, text: str) -> None:
        self.chunk(conn, self._candidate([{"text": text}]))

    def reasoning(self, conn: Conn, text: str) -> None:
        self.chunk(conn, self._candidate([{"text": text, "thought": True}]))

    def tool_call(self, conn: Conn, name: str, args: dict[str, Any]) -> None:
        self.chunk(conn, self._candidate([{"functionCall": {"name": name, "args": args}}]))

    def finish(self, conn: Conn, tokens: int, reason: str = "STOP") -> None:
        usage = {
            "promptTokenCount": 5,
            "candidatesTokenCount": tokens,
            "totalTokenCount": 5 + tokens,
        }
        doc = self._candidate([{"text": ""}], finishReason=reason)
        self.chunk(conn, {**doc, "usageMetadata": usage})

    def error(self, conn: Conn, message: str) -> None:
        self.chunk(conn, self.error_body(503, message))

    def error_body(self, status: int, message: str) -> Any:
        name = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}.get(status, "UNKNOWN")  # fmt: skip
        return {"error": {"code": status, "message": message, "status": name}}


GEMINI = GeminiDialect()
