"""A stream decoder for protocols that frame one JSON document per SSE `data:` line."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

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
