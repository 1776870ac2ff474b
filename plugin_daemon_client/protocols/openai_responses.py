"""OpenAI's Responses API (`kind: openai-responses`).

Request: `POST {base_url}/responses` (`base_url` as for openai-compatible,
`https://api.openai.com/v1`) with `stream: true` and `store: false`; the system
prompt is `instructions`, messages are `input` items (images as `input_image`,
tool calls and their answers as `function_call` / `function_call_output`
items), tools are flat `function` tools, a JSON schema is `text.format`
(`json_schema`), max tokens is `max_output_tokens`.

Stream: SSE events named by their `type`. `response.output_text.delta`, the
reasoning deltas and `response.function_call_arguments.delta` are content;
`response.created`, `response.in_progress`, `response.output_item.added`,
`response.content_part.added` and the other lifecycle events are not.
`response.completed` ends it (with the usage); `response.failed` and `error`
are typed errors. `response.incomplete` because of `max_output_tokens` ends it
as a reply cut at its length (finish reason `length`, as chat completions
report it); incomplete for any other reason (a content filter) is a blocked
reply.
"""

from __future__ import annotations

import json
from typing import Any

from firstgate.common.redaction import ServerText

from ..errors import (
    BadRequestError,
    ContentBlockedError,
    InvokeError,
    InvokeServerError,
    RateLimitError,
    ServerUnavailableError,
)
from . import messages as m
from .base import ChatCall, Item, StreamDecoder
from .frames import DONE, Frame, ToolCallDelta, Usage
from .openai_compatible import OpenAICompatible
from .request import PreparedRequest
from .sse_stream import EventStream

# Model parameters the API takes as they are.
_PASSED = ("temperature", "top_p", "reasoning", "metadata", "service_tier", "truncation", "user")
# The `code` of a `response.failed` / `error` -> ours; any other code is a server failure.
_ERROR_CODES: dict[str, type[InvokeError]] = {
    "rate_limit_exceeded": RateLimitError,
    "server_error": InvokeServerError,
    "server_is_overloaded": ServerUnavailableError,
    "slow_down": RateLimitError,
    "invalid_prompt": BadRequestError,
    "invalid_request_error": BadRequestError,
    "context_length_exceeded": BadRequestError,
    "vector_store_timeout": InvokeServerError,
    "invalid_image": BadRequestError,
    "invalid_image_format": BadRequestError,
    "image_too_large": BadRequestError,
}
_REASONING = (
    "response.reasoning_text.delta",
    "response.reasoning_summary_text.delta",
    "response.reasoning.delta",
)


class OpenAIResponses(OpenAICompatible):
    """The Responses API (see the module docstring); error statuses and their
    bodies are OpenAI's, as for chat completions."""

    kind = "openai-responses"

    def request(self, call: ChatCall) -> PreparedRequest:
        params = call.parameters
        body: dict[str, Any] = {k: params[k] for k in _PASSED if k in params}
        body.update(model=call.model, stream=True, store=False)
        system = m.system_text(call.messages)
        if system:
            body["instructions"] = system
        body["input"] = _input(call.messages)
        limit = params.get("max_output_tokens", params.get("max_tokens"))
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            body["max_output_tokens"] = limit
        if call.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                }
                for t in call.tools
            ]
            if call.tool_choice:
                body["tool_choice"] = call.tool_choice
        if call.json_schema is not None:
            fmt = {"type": "json_schema", "name": "answer", "schema": call.json_schema}
            body["text"] = {"format": fmt}
        headers = {"Accept": "text/event-stream"}
        if self.endpoint.api_key:
            headers["Authorization"] = f"Bearer {self.endpoint.api_key}"
        url = f"{self.endpoint.base_url.rstrip('/')}/responses"
        return PreparedRequest(url=url, headers=headers, body=body)

    def decoder(self, max_line_bytes: int, *, stream: bool = True) -> StreamDecoder:
        return ResponsesStream(max_line_bytes)


def _content(role: str, content: object) -> list[dict[str, Any]] | str:
    if role == "assistant":
        return m.text(content)
    out: list[dict[str, Any]] = []
    for part in m.parts(content):
        if isinstance(part, str):
            out.append({"type": "input_text", "text": part})
        elif part.url:
            out.append({"type": "input_image", "image_url": part.url})
    return out


def _input(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in messages:
        role = str(message.get("role") or "user")
        if role == "system":
            continue
        if role == "tool":
            output = m.text(message.get("content"))
            call_id = str(message.get("tool_call_id") or "")
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
            continue
        role = role if role in ("user", "assistant", "developer") else "user"
        content = _content(role, message.get("content"))
        if content:
            items.append({"role": role, "content": content})
        if role == "assistant":
            for call_id, name, arguments in m.tool_calls(message):
                raw = json.dumps(arguments, ensure_ascii=False)
                items.append(
                    {"type": "function_call", "call_id": call_id, "name": name, "arguments": raw}
                )
    return items


class ResponsesStream(EventStream):
    """One Responses API stream. A function call's id and name (from
    `response.output_item.added`, not content) go out with its first arguments
    piece, or whole when its item is done without any."""

    def __init__(self, max_line_bytes: int) -> None:
        super().__init__(max_line_bytes)
        self._calls: dict[int, tuple[str, str]] = {}
        self._called = False

    def event(self, doc: dict[str, Any]) -> Item | list[Item] | None:
        kind = doc.get("type")
        if kind == "response.output_text.delta":
            piece = doc.get("delta")
            return piece if isinstance(piece, str) and piece else None
        if kind in _REASONING:
            piece = doc.get("delta")
            return Frame(reasoning=piece) if isinstance(piece, str) and piece else None
        if kind == "response.function_call_arguments.delta":
            return self._arguments(doc)
        if kind == "response.output_item.added":
            self._item_added(doc)
        elif kind == "response.output_item.done":
            return self._item_done(doc)
        elif kind == "response.completed":
            return self._end(doc.get("response"), "tool_calls" if self._called else "stop")
        elif kind == "response.incomplete":
            return self._incomplete(doc.get("response"))
        elif kind in ("response.failed", "error"):
            raise _failure(doc)
        return None

    def _arguments(self, doc: dict[str, Any]) -> Item | None:
        piece, index = doc.get("delta"), doc.get("output_index")
        if not isinstance(piece, str) or not piece or not isinstance(index, int):
            return None
        call_id, name = self._calls.pop(index, ("", ""))
        self._called = True
        return Frame(tool_calls=(ToolCallDelta(index, call_id, name, piece),))

    def _item_added(self, doc: dict[str, Any]) -> None:
        item, index = doc.get("item"), doc.get("output_index")
        if (
            isinstance(item, dict)
            and item.get("type") == "function_call"
            and isinstance(index, int)
        ):
            self._calls[index] = (str(item.get("call_id") or ""), str(item.get("name") or ""))

    def _item_done(self, doc: dict[str, Any]) -> Item | None:
        index = doc.get("output_index")
        if not isinstance(index, int) or index not in self._calls:
            return None
        call_id, name = self._calls.pop(index)
        item = doc.get("item")
        raw = item.get("arguments") if isinstance(item, dict) else None
        self._called = True
        arguments = raw if isinstance(raw, str) and raw else "{}"
        return Frame(tool_calls=(ToolCallDelta(index, call_id, name, arguments),))

    def _incomplete(self, response: object) -> list[Item]:
        details = response.get("incomplete_details") if isinstance(response, dict) else None
        reason = details.get("reason") if isinstance(details, dict) else None
        if reason in ("max_output_tokens", None):
            return self._end(response, "length")
        raise ContentBlockedError(reason=ServerText(str(reason)))

    def _end(self, response: object, finish: str) -> list[Item]:
        self.ended = True
        usage = response.get("usage") if isinstance(response, dict) else None
        prompt, completion, total = m.usage_numbers(
            usage, "input_tokens", "output_tokens", "total_tokens"
        )
        return [Frame(finish_reason=finish, usage=Usage(prompt, completion, total)), DONE]


def _failure(doc: dict[str, Any]) -> InvokeError:
    """`response.failed` (`response.error`) or an `error` event as a typed error."""
    error: object = doc
    if doc.get("type") == "response.failed":
        response = doc.get("response")
        error = response.get("error") if isinstance(response, dict) else None
    elif isinstance(doc.get("error"), dict):
        error = doc["error"]
    code = error.get("code") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    cls = _ERROR_CODES.get(code, InvokeServerError) if isinstance(code, str) else InvokeServerError
    text = str(message or code or doc.get("type") or "").strip()
    return cls(detail=ServerText(text))
