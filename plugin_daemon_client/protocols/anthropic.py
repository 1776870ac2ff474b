"""Anthropic's Messages API (`kind: anthropic`).

Request: `POST {base_url}/v1/messages` (`base_url` is the API root,
`https://api.anthropic.com`) with `x-api-key` and `anthropic-version`; the
system prompt goes outside `messages`, `max_tokens` is required (a default
when the node sets none), images are base64 `image` blocks, tools carry an
`input_schema`. Anthropic has no response format: a JSON schema for the answer
becomes a forced tool (`FORCED_TOOL`) whose input is the answer, and the
decoder hands that input back as the reply's text.

Stream: SSE events named by their `type`. `content_block_delta` text,
`thinking_delta` and `input_json_delta` are content; `message_start`,
`content_block_start`/`_stop`, `ping` and `message_delta` (usage, stop reason)
are not. `message_stop` ends it; an `error` event is the typed error it names.
"""

from __future__ import annotations

import json
from typing import Any

from firstgate.common.redaction import ServerText

from ..errors import (
    AuthorizationError,
    BadRequestError,
    ContentBlockedError,
    InvokeError,
    InvokeServerError,
    RateLimitError,
    ServerUnavailableError,
    invoke_error_for_status,
)
from . import messages as m
from .base import ChatCall, Item, StreamDecoder, WireProtocol
from .frames import DONE, Frame, ToolCallDelta, Usage
from .request import PreparedRequest
from .sse_stream import EventStream, json_object

API_VERSION = "2023-06-01"
# `max_tokens` is required; a node that sets none gets this (every current
# Claude model allows at least this many output tokens).
DEFAULT_MAX_TOKENS = 4096
# The tool a JSON schema for the answer becomes (its input is the answer).
FORCED_TOOL = "firstgate_answer"
# Model parameters the API takes as they are (it refuses unknown fields).
_PASSED = ("temperature", "top_p", "top_k", "metadata", "thinking", "service_tier")
_TOOL_CHOICE = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "pause_turn": "stop",
}
# Anthropic's error types -> ours (`overloaded_error` is its 529).
_ERROR_TYPES: dict[str, type[InvokeError]] = {
    "invalid_request_error": BadRequestError,
    "not_found_error": BadRequestError,
    "request_too_large": BadRequestError,
    "authentication_error": AuthorizationError,
    "permission_error": AuthorizationError,
    "billing_error": AuthorizationError,
    "rate_limit_error": RateLimitError,
    "overloaded_error": ServerUnavailableError,
    "api_error": InvokeServerError,
    "timeout_error": InvokeServerError,
}


class Anthropic(WireProtocol):
    """Anthropic's Messages API (see the module docstring)."""

    kind = "anthropic"
    # api.anthropic.com answers no liveness probe.
    default_probe = "off"

    def request(self, call: ChatCall) -> PreparedRequest:
        params = call.parameters
        body: dict[str, Any] = {k: params[k] for k in _PASSED if k in params}
        body["model"] = call.model
        body["max_tokens"] = _max_tokens(params)
        body["stream"] = True
        system = m.system_text(call.messages)
        if system:
            body["system"] = system
        body["messages"] = _messages(call.messages)
        stops = call.stop or params.get("stop_sequences")
        if stops:
            body["stop_sequences"] = list(stops)
        tools = [_tool(t.name, t.description, t.parameters) for t in call.tools]
        if call.json_schema is not None:
            tools.append(_tool(FORCED_TOOL, "Give the answer.", _object_schema(call.json_schema)))
            body["tool_choice"] = {"type": "tool", "name": FORCED_TOOL}
        elif call.tools and call.tool_choice in _TOOL_CHOICE:
            body["tool_choice"] = _TOOL_CHOICE[call.tool_choice]
        if tools:
            body["tools"] = tools
        headers = {
            "Accept": "text/event-stream",
            "anthropic-version": API_VERSION,
        }
        if self.endpoint.api_key:
            headers["x-api-key"] = self.endpoint.api_key
        url = f"{self.endpoint.base_url.rstrip('/')}/v1/messages"
        return PreparedRequest(url=url, headers=headers, body=body)

    def status_error(self, status: int, body: bytes, *, retry_after_s: float | None) -> InvokeError:
        doc = json_object(body)
        if status == 529:
            cls: type[InvokeError] = ServerUnavailableError
        else:
            cls = invoke_error_for_status(status)
        return error_of(doc if doc is not None else body, cls, status, retry_after_s)

    def decoder(self, max_line_bytes: int, *, stream: bool = True) -> StreamDecoder:
        return MessagesStream(max_line_bytes)


def _max_tokens(params: dict[str, Any]) -> int:
    value = params.get("max_tokens")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return DEFAULT_MAX_TOKENS


def _tool(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "description": description, "input_schema": schema}


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's input is an object: a schema of anything else cannot be the forced tool."""
    if schema.get("type", "object") != "object":
        raise BadRequestError(
            detail="Anthropic takes a JSON schema for the answer only as a tool's "
            "input, which must be an object (the schema's type is "
            f"{schema.get('type')!r})"
        )
    return {"type": "object", **schema}


def _blocks(content: object) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in m.parts(content):
        if isinstance(part, str):
            out.append({"type": "text", "text": part})
        elif part.inline:
            source = {"type": "base64", "media_type": part.media_type, "data": part.data}
            out.append({"type": "image", "source": source})
        elif part.url:
            out.append({"type": "image", "source": {"type": "url", "url": part.url}})
    return out


def _messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """User and assistant turns, alternating (consecutive turns of one role are
    merged); tool answers are `tool_result` blocks of a user turn."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            continue
        if role == "tool":
            blocks: list[dict[str, Any]] = [
                {
                    "type": "tool_result",
                    "tool_use_id": str(message.get("tool_call_id") or ""),
                    "content": m.text(message.get("content")),
                }
            ]
            role = "user"
        else:
            blocks = _blocks(message.get("content"))
            if role == "assistant":
                blocks += [
                    {"type": "tool_use", "id": i, "name": n, "input": a}
                    for i, n, a in m.tool_calls(message)
                ]
            else:
                role = "user"
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return turns


class MessagesStream(EventStream):
    """One Messages API stream. Keeps the usage and the stop reason until
    `message_stop`, and which content block is a tool call (its id and name go
    out with its first input piece)."""

    def __init__(self, max_line_bytes: int) -> None:
        super().__init__(max_line_bytes)
        self._input_tokens = 0
        self._output_tokens = 0
        self._stop: str | None = None
        # block index -> (id, name) of a tool call not yet handed out; the forced
        # answer tool's index, whose input is the reply's text.
        self._tools: dict[int, tuple[str, str]] = {}
        self._answer: int | None = None

    def event(self, doc: dict[str, Any]) -> Item | list[Item] | None:
        kind = doc.get("type")
        if kind == "content_block_delta":
            return self._delta(doc)
        if kind == "message_delta":
            self._message_delta(doc)
        elif kind == "content_block_start":
            self._block_start(doc)
        elif kind == "content_block_stop":
            return self._block_stop(doc.get("index"))
        elif kind == "message_start":
            message = doc.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            self._count(usage)
        elif kind == "message_stop":
            return self._end()
        elif kind == "error":
            raise error_of(doc, InvokeServerError, None, None)
        return None  # ping, unknown types

    def _delta(self, doc: dict[str, Any]) -> Item | None:
        delta = doc.get("delta")
        if not isinstance(delta, dict):
            return None
        kind = delta.get("type")
        if kind == "text_delta":
            piece = delta.get("text")
            return piece if isinstance(piece, str) and piece else None
        if kind == "thinking_delta":
            piece = delta.get("thinking")
            return Frame(reasoning=piece) if isinstance(piece, str) and piece else None
        if kind == "input_json_delta":
            piece, index = delta.get("partial_json"), doc.get("index")
            if not isinstance(piece, str) or not isinstance(index, int) or not piece:
                return None
            if index == self._answer:
                return piece
            call_id, name = self._tools.pop(index, ("", ""))
            return Frame(tool_calls=(ToolCallDelta(index, call_id, name, piece),))
        return None  # signature_delta, citations_delta, unknown

    def _block_start(self, doc: dict[str, Any]) -> None:
        block, index = doc.get("content_block"), doc.get("index")
        if not isinstance(block, dict) or not isinstance(index, int):
            return
        if block.get("type") != "tool_use":
            return
        name = str(block.get("name") or "")
        if name == FORCED_TOOL:
            self._answer = index
        else:
            self._tools[index] = (str(block.get("id") or ""), name)

    def _block_stop(self, index: object) -> Item | None:
        """A tool call whose input never came in pieces goes out whole (`{}`)."""
        if not isinstance(index, int) or index not in self._tools:
            return None
        call_id, name = self._tools.pop(index)
        return Frame(tool_calls=(ToolCallDelta(index, call_id, name, "{}"),))

    def _message_delta(self, doc: dict[str, Any]) -> None:
        delta = doc.get("delta")
        reason = delta.get("stop_reason") if isinstance(delta, dict) else None
        if isinstance(reason, str):
            if reason == "refusal":
                raise ContentBlockedError(reason=ServerText(reason))
            self._stop = _STOP_REASONS.get(reason, reason)
        self._count(doc.get("usage"))

    def _count(self, usage: object) -> None:
        inputs, cache_read, cache_made, outputs = m.usage_numbers(
            usage,
            "input_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "output_tokens",
        )
        # `message_delta` counts are cumulative; a count it leaves out stays.
        if inputs or cache_read or cache_made:
            self._input_tokens = inputs + cache_read + cache_made
        if outputs:
            self._output_tokens = outputs

    def _end(self) -> list[Item]:
        self.ended = True
        if self._answer is not None and self._stop == "tool_calls":
            self._stop = "stop"  # the forced answer tool is the answer, not a call
        prompt, completion = self._input_tokens, self._output_tokens
        usage = Usage(prompt, completion, prompt + completion)
        return [Frame(finish_reason=self._stop or "stop", usage=usage), DONE]


def error_of(
    doc: object, default: type[InvokeError], status: int | None, retry_after_s: float | None
) -> InvokeError:
    """An `{"type": "error", "error": {"type", "message"}}` body or event as a typed error."""
    error = doc.get("error") if isinstance(doc, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    detail = error.get("message") if isinstance(error, dict) else None
    if isinstance(doc, bytes):
        detail = doc.decode("utf-8", "replace")
    cls = _ERROR_TYPES.get(kind, default) if isinstance(kind, str) else default
    if status is not None and cls is not default and default is not InvokeServerError:
        cls = default  # the status decides; the type only refines a bare 5xx
    text = str(detail or kind or "").strip()
    if not text:
        text = json.dumps(doc)[:400] if isinstance(doc, dict) else f"HTTP {status}"
    return cls(status=status, retry_after_s=retry_after_s, detail=ServerText(text))
