"""Incremental, bounded Server-Sent Events line decoder.

Each `data:` line is one frame: the model servers we speak to (llama.cpp,
vLLM, Ollama, the Dify plugin daemon) put one JSON document on one line, and
dispatching per line delivers a token without waiting for the blank line.
Comment lines (`: ping`) and the other SSE fields are skipped. A line longer
than `max_line_bytes` is an error, not unbounded memory; a line that is not
SSE at all means the body is not an event stream.
"""

from __future__ import annotations

DEFAULT_MAX_LINE_BYTES = 1 << 20

_SKIPPED_FIELDS = (b"event:", b"id:", b"retry:", b"event", b"id", b"retry")


class SSEViolation(Exception):
    """The byte stream broke the SSE framing; `kind` is "too_large" or "not_sse"."""

    def __init__(self, kind: str, line: bytes) -> None:
        super().__init__(kind)
        self.kind = kind
        self.line = line[:400]


class SSEDecoder:
    __slots__ = ("_buffer", "_max")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._buffer = b""
        self._max = max_line_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        """Consume bytes; return the payloads of the complete `data:` lines."""
        body = self.complete(chunk)
        return [] if body is None else self.payloads_of(body)

    def complete(self, chunk: bytes) -> bytes | None:
        """Consume bytes; return the complete lines so far (without the last
        newline) or None, keeping the unfinished line, bounded by the limit."""
        data = self._buffer + chunk if self._buffer else chunk
        end = data.rfind(b"\n") + 1
        tail = data[end:]
        if len(tail) > self._max:
            raise SSEViolation("too_large", tail)
        self._buffer = tail
        return data[: end - 1] if end else None

    def payloads_of(self, body: bytes) -> list[bytes]:
        """The payloads of `body`, complete lines as `complete` returns them."""
        if b"\r" not in body:
            # The common case, at C speed: every non-blank line is `data: ...`
            # and fits the limit. Anything else takes the line-by-line path.
            lines = list(filter(None, body.split(b"\n")))
            if not lines:
                return []
            if (b"\n" + b"\n".join(lines)).count(b"\ndata: ") == len(lines) and max(
                map(len, lines)
            ) <= self._max:
                return [line[6:] for line in lines]
        return self._payloads(body.split(b"\n"))

    @property
    def limit(self) -> int:
        return self._max

    @property
    def pending(self) -> bytes:
        """The unfinished last line kept so far."""
        return self._buffer

    def close(self) -> list[bytes]:
        """The stream ended: a last line without a newline still counts."""
        tail, self._buffer = self._buffer, b""
        return self._payloads([tail]) if tail else []

    def _payloads(self, lines: list[bytes]) -> list[bytes]:
        out: list[bytes] = []
        limit = self._max
        for line in lines:
            if line[:5] == b"data:":
                if len(line) > limit:
                    raise SSEViolation("too_large", line)
                payload = line[5:]
                if payload[:1] == b" ":
                    payload = payload[1:]
                if payload[-1:] == b"\r":
                    payload = payload[:-1]
                out.append(payload)
            elif not line or line == b"\r" or line[:1] == b":":
                continue
            elif line.rstrip(b"\r").startswith(_SKIPPED_FIELDS):
                continue
            else:
                raise SSEViolation("too_large" if len(line) > limit else "not_sse", line)
        return out
