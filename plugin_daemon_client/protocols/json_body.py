"""A decoder for a reply that is one JSON document (a non-streamed completion).

The first bytes of the body are the reply's first content: the decoder says
so (`BODY_STARTED`), which ends the gate's first-token phase; the stream cap
and the reply size cap bound the rest. The whole body is parsed when it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from .base import Item, StreamDecoder, TruncatedFrame
from .frames import BODY_STARTED, DONE, Frame, FrameError


class JsonBody(StreamDecoder):
    media_type = "application/json"

    def __init__(self, parse: Callable[[bytes], Frame]) -> None:
        self._parse = parse
        self._body = bytearray()

    def feed(self, data: bytes) -> Iterable[Item]:
        if not data:
            return ()
        started = not self._body
        self._body += data
        return (BODY_STARTED,) if started else ()

    def close(self) -> Iterator[Item]:
        body = bytes(self._body)
        if not body.strip():
            return
        try:
            frame = self._parse(body)
        except FrameError as bad:
            if bad.reason == "not JSON" and _cut_short(body):
                raise TruncatedFrame("the body ended mid-document", bad.raw) from None
            raise
        yield frame
        yield DONE


def _cut_short(body: bytes) -> bool:
    """A JSON object that was never closed: the body stopped mid-document."""
    text = body.strip()
    return text[:1] == b"{" and text[-1:] != b"}"
