"""Length-prefixed JSON frames over a stream socket: 4-byte big-endian length, then UTF-8 JSON.

Stdlib only: used by the sandbox worker and by the runtime's side of the pipe.
"""

from __future__ import annotations

import array
import json
import os
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


class FrameTooLarge(FrameError):
    """The frame's header announces more than the reader accepts; nothing more was read."""


def encode(message: Any) -> bytes:
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(len(body)) + body


def send(sock: socket.socket, message: Any) -> None:
    sock.sendall(encode(message))


def _read_exact(
    sock: socket.socket, size: int, deadline: float | None, fds: list[int] | None = None
) -> bytes:
    """`size` bytes; with `fds`, read with recvmsg and collect passed descriptors
    (a plain read would silently close them)."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FrameTimeout("no complete frame before the deadline")
            sock.settimeout(remaining)
        try:
            if fds is None:
                chunk = sock.recv(size - got)
            else:
                chunk, ancillary, _, _ = sock.recvmsg(size - got, _ANCILLARY)
                fds.extend(_descriptors(ancillary))
        except TimeoutError:
            raise FrameTimeout("no complete frame before the deadline") from None
        except ConnectionError as exc:
            raise PeerClosed(f"the connection broke: {exc}") from None
        if not chunk:
            raise PeerClosed("the other side closed the connection")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


_MAX_FDS = 4
_ANCILLARY = socket.CMSG_SPACE(_MAX_FDS * array.array("i").itemsize)


def _descriptors(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    found = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            found.frombytes(data[: len(data) - len(data) % found.itemsize])
    return list(found)


def receive(sock: socket.socket, max_bytes: int, deadline: float | None = None) -> Any:
    """One frame; `deadline` is a time.monotonic() instant (None: wait for ever)."""
    return _receive(sock, max_bytes, deadline, None)


def receive_with_fds(
    sock: socket.socket, max_bytes: int, deadline: float | None = None
) -> tuple[Any, list[int]]:
    """One frame and the descriptors passed with it (the caller owns them)."""
    fds: list[int] = []
    try:
        return _receive(sock, max_bytes, deadline, fds), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _receive(
    sock: socket.socket, max_bytes: int, deadline: float | None, fds: list[int] | None
) -> Any:
    (size,) = _HEADER.unpack(_read_exact(sock, _HEADER.size, deadline, fds))
    if size > max_bytes:
        raise FrameTooLarge(f"frame of {size} bytes is larger than the limit of {max_bytes}")
    body = _read_exact(sock, size, deadline, fds)
    try:
        return json.loads(body)
    except ValueError as exc:
        raise FrameError(f"frame is not JSON: {exc}") from None
