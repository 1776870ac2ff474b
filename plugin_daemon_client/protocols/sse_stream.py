"""A stream decoder for protocols that frame one JSON document per SSE `data:` line."""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..sse import SSEDecoder
from .base import Item, StreamDecoder, TruncatedFrame
from .frames import Frame, FrameError

_DATA = b"data:"


def item_of(frame: Frame) -> Item:
    """A plain content token travels as its text; anything else as the frame."""
    if frame.text and not (
        frame.reasoning or frame.finish_reason or frame.usage or frame.done or frame.tool_calls
    ):
        return frame.text
    return frame


class SSEStream(StreamDecoder):
    """SSE line framing plus a protocol's payload decoder (`decode(payload) -> Frame`)."""

    def __init__(self, decode: Callable[[bytes], Frame], max_line_bytes: int) -> None:
        self._lines = SSEDecoder(max_line_bytes)
        self._decode = decode

    def feed(self, data: bytes) -> Iterable[Item]:
        body = self._lines.complete(data)
        if body is None:
            return ()
        return self.items(self._lines.payloads_of(body))

    def items(self, payloads: list[bytes]) -> Iterator[Item]:
        decode = self._decode
        for payload in payloads:
            yield item_of(decode(payload))

    def close(self) -> Iterator[Item]:
        tail = self._lines.pending
        if tail and _DATA.startswith(tail):  # cut inside the field name itself
            raise TruncatedFrame("the body ended mid-frame", tail)
        for payload in self._lines.close():
            try:
                frame = self._decode(payload)
            except TruncatedFrame:
                raise
            except FrameError as bad:
                raise TruncatedFrame(bad.reason, bad.raw) from None
            yield item_of(frame)


_scan = json.JSONDecoder().scan_once


def items_of(
    documents: Iterable[bytes], event: Callable[[dict[str, Any]], Item | list[Item] | None]
) -> Iterator[Item]:
    """What a stream's JSON documents say, one protocol event at a time: a document
    that is not a JSON object is ignored, an event that is not content (None)
    yields nothing, one that carries several items yields each."""
    for document in documents:
        doc = json_object(document)
        if doc is None:
            continue
        item = event(doc)
        if item is None:
            continue
        if type(item) is list:
            yield from item
        else:
            yield item  # type: ignore[misc]


def json_object(payload: bytes) -> dict[str, Any] | None:
    """One payload as a JSON object, or None when it is not one (malformed: ignored).
    Invalid UTF-8 becomes U+FFFD (see openai_compatible.decode)."""
    text = payload.decode("utf-8", "replace")
    try:
        # The parser's own scanner, without `json.loads`'s layers: a payload is
        # one object from its first byte; anything else takes the full parse.
        doc, end = _scan(text, 0) if text[:1] == "{" else (None, -1)
        if end != len(text):
            doc = json.loads(text)
    except StopIteration:
        return None
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


class EventStream(StreamDecoder):
    """SSE events, one JSON object per `data:` line, of a protocol that names its
    end (Anthropic's `message_stop`, the Responses API's `response.completed`,
    Gemini's `finishReason`). `event(doc)` maps one event to an item, a list of
    items, or None (lifecycle events, pings, unknown types). A payload that is not
    a JSON object is ignored, never content; a body that ends before the end
    marker is `TruncatedFrame`, never a silent success."""

    def __init__(self, max_line_bytes: int) -> None:
        self._lines = SSEDecoder(max_line_bytes)
        self.ended = False
        self._fed = False

    @abstractmethod
    def event(self, doc: dict[str, Any]) -> Item | list[Item] | None: ...

    def feed(self, data: bytes) -> Iterable[Item]:
        self._fed = self._fed or bool(data)
        body = self._lines.complete(data)
        if body is None:
            return ()
        return self.items(self._named_payloads(body) or self._lines.payloads_of(body))

    def _named_payloads(self, body: bytes) -> list[bytes] | None:
        """The payloads of `body` when, at C speed, every line is blank, `event: ...`
        or `data: ...` within the line limit (the usual named-event layout); else
        None (the line-by-line path decides)."""
        if b"\r" in body:  # Gemini ends its lines with CRLF
            body = body.replace(b"\r\n", b"\n")
            if body[-1:] == b"\r":  # the CR of the line `complete` cut before its LF
                body = body[:-1]
            if b"\r" in body:
                return None
        lines = list(filter(None, body.split(b"\n")))
        if not lines or max(map(len, lines)) > self._lines.limit:
            return None
        payloads = [line[6:] for line in lines if line[:6] == b"data: "]
        named = (b"\n" + b"\n".join(lines)).count(b"\nevent:")
        return payloads if payloads and len(payloads) + named == len(lines) else None

    def items(self, payloads: list[bytes]) -> Iterator[Item]:
        return items_of(payloads, self.event)

    def close(self) -> Iterator[Item]:
        tail = self._lines.pending
        if tail and _DATA.startswith(tail):
            raise TruncatedFrame("the body ended mid-frame", tail)
        payloads = self._lines.close()
        for payload in payloads:
            if json_object(payload) is None:
                raise TruncatedFrame("the body ended mid-frame", payload)
        yield from self.items(payloads)
        if self._fed and not self.ended:
            raise TruncatedFrame("the stream ended before the protocol's end marker", tail)
