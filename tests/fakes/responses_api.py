"""A fake of OpenAI's Responses API stream (`POST /v1/responses`), as
api.openai.com sends it: `response.created`, `response.in_progress`,
`response.output_item.added` and `response.content_part.added` before the
first `response.output_text.delta`; `response.completed` (with the usage) at
the end; failures as `response.failed` or `error` events."""

from __future__ import annotations

from typing import Any

from tests.fakes.dialects import Dialect
from tests.fakes.llm_server import Conn


class ResponsesDialect(Dialect):
    kind = "openai-responses"

    def base_url(self, root_url: str) -> str:
        return f"{root_url}/v1"

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        return {"id": "resp_fake", "object": "response", "status": status, **extra}

    def start(self, conn: Conn) -> None:
        super().start(conn)
        self.event(
            conn,
            "response.created",
            {"type": "response.created", "response": self._response("in_progress")},
        )
        self.keepalive(conn)
        item = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
        added = {"type": "response.output_item.added", "output_index": 0, "item": item}
        self.event(conn, "response.output_item.added", added)
        part = {"type": "output_text", "text": ""}
        doc = {
            "type": "response.content_part.added",
            "item_id": "msg_1",
            "output_index": 0,
            "part": part,
        }
        self.event(conn, "response.content_part.added", doc)

    def keepalive(self, conn: Conn) -> None:
        doc = {"type": "response.in_progress", "response": self._response("in_progress")}
        self.event(conn, "response.in_progress", doc)

    def token(self, conn: Conn, text: str) -> None:
        doc = {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 0,
            "delta": text,
        }
        self.event(conn, "response.output_text.delta", doc)

    def reasoning(self, conn: Conn, text: str) -> None:
        doc = {"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": text}
        self.event(conn, "response.reasoning_summary_text.delta", doc)

    def tool_call(self, conn: Conn, index: int, name: str, pieces: list[str]) -> None:
        item = {
            "type": "function_call",
            "id": f"fc_{index}",
            "call_id": f"call_{index}",
            "name": name,
            "arguments": "",
        }
        self.event(
            conn,
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": index, "item": item},
        )
        for piece in pieces:
            doc = {
                "type": "response.function_call_arguments.delta",
                "output_index": index,
                "delta": piece,
            }
            self.event(conn, "response.function_call_arguments.delta", doc)
        done = {**item, "arguments": "".join(pieces)}
        self.event(
            conn,
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": index, "item": done},
        )

    def finish(
        self, conn: Conn, tokens: int, kind: str = "response.completed", reason: str = ""
    ) -> None:
        self.event(
            conn, "response.output_text.done", {"type": "response.output_text.done", "text": "..."}
        )
        usage = {"input_tokens": 5, "output_tokens": tokens, "total_tokens": 5 + tokens}
        extra: dict[str, Any] = {"usage": usage}
        if reason:
            extra["incomplete_details"] = {"reason": reason}
        status = "completed" if kind == "response.completed" else "incomplete"
        self.event(conn, kind, {"type": kind, "response": self._response(status, **extra)})

    def error(self, conn: Conn, message: str, code: str = "server_error") -> None:
        error = {"code": code, "message": message}
        doc = {"type": "response.failed", "response": self._response("failed", error=error)}
        self.event(conn, "response.failed", doc)

    def error_body(self, status: int, message: str) -> Any:
        return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


RESPONSES = ResponsesDialect()
