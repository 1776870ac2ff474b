"""Length-prefixed JSON frames over a stream socket: 4-byte big-endian length, then UTF-8 JSON.

Stdlib only: used by the sandbox worker and by the runtime's side of the pipe.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any

_HEADER = struct.Struct(">I")


class FrameError(Exception):
    """The other side sent something that is not a frame, or too big a one."""


class PeerClosed(FrameError):
    """The other side closed the connection."""


class FrameTimeout(FrameError):
    """No complete frame before the deadline."""


def encode(message: Any) -> bytes:
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(len(body)) + body


def send(sock: socket.socket, message: Any) -> None:
    sock.sendall(encode(message))


def _read_exact(sock: socket.socket, size: int, deadline: float | None) -> bytes:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FrameTimeout("no complete frame before the deadline")
            sock.settimeout(remaining)
        try:
            count = sock.recv_into(view[got:], size - got)
        except TimeoutError:
            raise FrameTimeout("no complete frame before the deadline") from None
        except ConnectionError as exc:
            raise PeerClosed(f"the connection broke: {exc}") from None
        if count == 0:
            raise PeerClosed("the other side closed the connection")
        got += count
    return bytes(buffer)


def receive(sock: socket.socket, max_bytes: int, deadline: float | None = None) -> Any:
    """One frame; `deadline` is a time.monotonic() instant (None: wait for ever)."""
    (size,) = _HEADER.unpack(_read_exact(sock, _HEADER.size, deadline))
    if size > max_bytes:
        raise FrameError(f"frame of {size} bytes is larger than the limit of {max_bytes}")
    body = _read_exact(sock, size, deadline)
    try:
        return json.loads(body)
    except ValueError as exc:
        raise FrameError(f"frame is not JSON: {exc}") from None
