"""Reading the OpenAI-shaped messages of a `ChatCall`, for protocols that spell
them another way (Anthropic, the Responses API, Gemini, Ollama)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequestError


@dataclass(frozen=True, slots=True)
class Image:
    """An image part: a data URI's media type and base64 bytes, or a URL."""

    url: str
    media_type: str = ""
    data: str = ""  # base64, when the part was a data URI

    @property
    def inline(self) -> bool:
        return bool(self.data)


Part = str | Image


def _image(part: dict[str, Any]) -> Image:
    ref = part.get("image_url")
    url = ref.get("url", "") if isinstance(ref, dict) else str(ref or "")
    if url.startswith("data:") and ";base64," in url:
        head, _, data = url.partition(";base64,")
        return Image(url, head[5:] or "application/octet-stream", data)
    return Image(url)


def parts(content: object) -> Iterator[Part]:
    """A message's content as text and image parts, in order."""
    if content is None:
        return
    if isinstance(content, str):
        if content:
            yield content
        return
    if not isinstance(content, list):
        yield str(content)
        return
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type", "text")
        if kind == "text" and part.get("text"):
            yield str(part["text"])
        elif kind == "image_url":
            yield _image(part)


def text(content: object) -> str:
    """The text parts of a message's content, joined."""
    return "".join(p for p in parts(content) if isinstance(p, str))


def system_text(messages: list[dict[str, Any]]) -> str:
    """The system messages' text, joined by blank lines."""
    return "\n\n".join(
        t for m in messages if m.get("role") == "system" and (t := text(m.get("content")))
    )


def arguments(raw: object) -> dict[str, Any]:
    """A tool call's arguments (a JSON text) as the object a protocol sends."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise BadRequestError(detail="a tool call's arguments are not a JSON object")
    return value


def tool_calls(message: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """An assistant message's tool calls: (id, name, arguments)."""
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            yield (
                str(call.get("id") or ""),
                str(function.get("name") or ""),
                arguments(function.get("arguments")),
            )


def usage_numbers(raw: object, *keys: str) -> tuple[int, ...]:
    """Whole numbers of `raw[key]` for each key (0 where absent or not a number)."""
    out: list[int] = []
    for key in keys:
        value = raw.get(key) if isinstance(raw, dict) else None
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value == value
        out.append(int(value) if ok and abs(value) < 1e18 else 0)
    return tuple(out)
