"""Ollama's native chat API (`kind: ollama`).

Request: `POST {base_url}/api/chat` (`http://127.0.0.1:11434`), `stream: true`;
messages keep their roles, images go as base64 `images` of their message, tools
as OpenAI-style `function` tools, a JSON schema as `format`, model parameters
under `options` (`max_tokens` is `num_predict`).

Stream: NDJSON, one JSON object per line (no SSE). `message.content`,
`message.thinking` and `message.tool_calls` are content; `done: true` ends it
with `done_reason` and the counts; an `{"error": ...}` line is a typed error.
Ollama sends nothing at all while it loads a model: that wait is the
first-token wait, bounded by the gate like any other.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import BadRequestError, InvokeError
from ..sse import SSEViolation
from . import messages as m
from .base import ChatCall, Item, StreamDecoder, TruncatedFrame
from .frames import DONE, Frame, ToolCallDelta, Usage
from .openai_compatible import OpenAICompatible, error_from_body
from .request import PreparedRequest
from .sse_stream import items_of, json_object

DEFAULT_BASE_URL = "http://127.0.0.1:11434"
# Model parameters Ollama takes under `options`, by their Dify/OpenAI name.
_OPTIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "seed": "seed",
    "max_tokens": "num_predict",
    "num_predict": "num_predict",
    "num_ctx": "num_ctx",
    "repeat_penalty": "repeat_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "min_p": "min_p",
}
_PASSED = ("keep_alive", "think")


class Ollama(OpenAICompatible):
    """Ollama's `/api/chat` (see the module docstring). The probe (`auto`) asks
    the same host; error statuses carry `{"error": "..."}` as OpenAI's do."""

    kind = "ollama"

    def request(self, call: ChatCall) -> PreparedRequest:
        params = call.parameters
        body: dict[str, Any] = {k: params[k] for k in _PASSED if k in params}
        body.update(model=call.model, stream=True, messages=_messages(call.messages))
        options = {_OPTIONS[k]: v for k, v in params.items() if k in _OPTIONS}
        if call.stop:
            options["stop"] = list(call.stop)
        if options:
            body["options"] = options
        if call.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in call.tools
            ]
        if call.json_schema is not None:
            body["format"] = call.json_schema
        headers = {"Accept": "application/x-ndjson"}
        if self.endpoint.api_key:  # a proxy in front of Ollama may want one
            headers["Authorization"] = f"Bearer {self.endpoint.api_key}"
        url = f"{self.endpoint.base_url.rstrip('/')}/api/chat"
        return PreparedRequest(url=url, headers=headers, body=body)

    def decoder(self, max_line_bytes: int, *, stream: bool = True) -> StreamDecoder:
        return NDJSONStream(max_line_bytes)


def _message(message: dict[str, Any]) -> dict[str, Any]:
    role = str(message.get("role") or "user")
    out: dict[str, Any] = {"role": role, "content": ""}
    texts: list[str] = []
    images: list[str] = []
    for part in m.parts(message.get("content")):
        if isinstance(part, str):
            texts.append(part)
        elif part.inline:
            images.append(part.data)
        else:
            raise BadRequestError(detail="Ollama takes images only as their bytes, not by URL")
    out["content"] = "".join(texts)
    if images:
        out["images"] = images
    if role == "assistant":
        calls = [{"function": {"name": n, "arguments": a}} for _, n, a in m.tool_calls(message)]
        if calls:
            out["tool_calls"] = calls
    return out


def _messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [_message(message) for message in messages]


class NDJSONStream(StreamDecoder):
    """One JSON object per line, each line bounded by `max_line_bytes`. A line
    that is not a JSON object is ignored; a body that ends before `done: true`
    is `TruncatedFrame`."""

    media_type = "application/x-ndjson"

    def __init__(self, max_line_bytes: int) -> None:
        self._max = max_line_bytes
        self._buffer = b""
        self._fed = False
        self._ended = False
        self._calls = 0

    def feed(self, data: bytes) -> Iterable[Item]:
        if not data:
            return ()
        self._fed = True
        data = self._buffer + data if self._buffer else data
        lines = data.split(b"\n")
        self._buffer = lines.pop()
        if len(self._buffer) > self._max:
            raise SSEViolation("too_large", self._buffer)
        return self._items(lines)

    def _items(self, lines: list[bytes]) -> Iterator[Item]:
        if lines and max(map(len, lines)) > self._max:
            raise SSEViolation("too_large", max(lines, key=len))
        yield from items_of(lines, self._event)

    def _event(self, doc: dict[str, Any]) -> Item | list[Item] | None:
        if "error" in doc and doc["error"]:
            raise _error_line(doc)
        message = doc.get("message")
        item: Item | None = None
        if isinstance(message, dict):
            text = message.get("content")
            text = text if isinstance(text, str) else ""
            if "thinking" in message or "tool_calls" in message:
                thinking = message.get("thinking")
                thinking = thinking if isinstance(thinking, str) else ""
                calls = self._tool_calls(message.get("tool_calls"))
                if thinking or calls or text:
                    item = Frame(text=text, reasoning=thinking, tool_calls=calls)
            elif text:
                item = text
        if doc.get("done") is not True:
            return item
        self._ended = True
        finish = "tool_calls" if self._calls else "stop"
        if doc.get("done_reason") == "length":
            finish = "length"
        prompt, completion = m.usage_numbers(doc, "prompt_eval_count", "eval_count")
        end = Frame(finish_reason=finish, usage=Usage(prompt, completion, prompt + completion))
        return [end, DONE] if item is None else [item, end, DONE]

    def _tool_calls(self, raw: object) -> tuple[ToolCallDelta, ...]:
        """Ollama hands out whole calls (no index); each gets an id of its own."""
        if not isinstance(raw, list):
            return ()
        found: list[ToolCallDelta] = []
        for call in raw:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                continue
            arguments = function.get("arguments")
            text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
            self._calls += 1
            call_id = str(call.get("id") or f"call_{self._calls}")
            found.append(ToolCallDelta(None, call_id, function["name"], text))
        return tuple(found)

    def close(self) -> Iterator[Item]:
        tail, self._buffer = self._buffer, b""
        if tail.strip():
            if json_object(tail) is None:
                raise TruncatedFrame("the body ended mid-line", tail)
            yield from self._items([tail])
        if self._fed and not self._ended:
            raise TruncatedFrame("the stream ended before done: true", tail)


def _error_line(doc: dict[str, Any]) -> InvokeError:
    """An `{"error": ...}` line mid-stream: Ollama gives no status, so a server failure."""
    return error_from_body(500, doc)
