"""A fake of Ollama's native chat stream (`POST /api/chat`): NDJSON, one JSON
object per line, `done: true` with `done_reason` and the counts at the end,
`{"error": "..."}` lines and bodies. Ollama sends nothing while it loads a
model (`dialects.silence_then`); its "keep-alive" here is a chunk whose
content is empty (what it sends around tool calls), which is not a token."""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.dialects import Dialect
from tests.fakes.llm_server import Conn


class OllamaDialect(Dialect):
    kind = "ollama"
    media_type = "application/x-ndjson"

    def line(self, conn: Conn, doc: Any) -> None:
        conn.send(json.dumps(doc).encode() + b"\n")

    def event(self, conn: Conn, name: str, doc: Any) -> None:
        self.line(conn, doc)

    def _chunk(self, content: str = "", **message: Any) -> dict[str, Any]:
        return {
            "model": "llama3",
            "created_at": "2026-12-01T00:00:00Z",
            "message": {"role": "assistant", "content": content, **message},
            "done": False,
        }

    def keepalive(self, conn: Conn) -> None:
        self.line(conn, self._chunk(""))

    def token(self, conn: Conn, text: str) -> None:
        self.line(conn, self._chunk(text))

    def reasoning(self, conn: Conn, text: str) -> None:
        self.line(conn, self._chunk("", thinking=text))

    def tool_call(self, conn: Conn, name: str, arguments: dict[str, Any]) -> None:
        self.line(
            conn, self._chunk("", tool_calls=[{"function": {"name": name, "arguments": arguments}}])
        )

    def finish(self, conn: Conn, tokens: int, reason: str = "stop") -> None:
        done = {**self._chunk(""), "done": True, "done_reason": reason}
        done.update(total_duration=1, prompt_eval_count=5, eval_count=tokens)
        self.line(conn, done)

    def error(self, conn: Conn, message: str) -> None:
        self.line(conn, {"error": message})

    def error_body(self, status: int, message: str) -> Any:
        return {"error": message}

    def unknown(self, conn: Conn) -> None:
        self.line(conn, {"firstgate_unknown": "NOPE", "text": "NOPE"})

    def malformed(self, conn: Conn) -> None:
        conn.send(b'{"message": {"content": "NOPE"\n')

    def big_event(self, conn: Conn, size: int) -> None:
        conn.send(b'{"message": {"content": "' + b"x" * size + b'"}}\n')


OLLAMA = OllamaDialect()
