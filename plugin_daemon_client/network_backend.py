"""A gate-aware httpcore network backend.

httpcore copies the read timeout once per response and calls `settimeout`
before every `recv`, so nothing above the socket can switch a stream from a
first-token budget to an idle budget mid-way. Its `network_backend` hook can:
every `read(max_bytes, timeout)` here is bounded by `min(timeout, what the
current gate has left)`. A read that times out on the gate's bound is
handled *inside* this wrapper, before httpcore sees it, so the watchdog can
extend the wait and keep reading on the same connection.

Outside a gate, reads are plain httpcore reads.
"""

from __future__ import annotations

import fcntl
import select
import socket
import struct
import termios
import time
from collections.abc import Iterable
from typing import Any

import httpcore

from .errors import Trip
from .gate import Gate, current_gate


def _readable_now(sock: socket.socket | None) -> bool:
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True  # let the read itself report the broken socket
    return bool(readable)


def _pending_bytes(sock: socket.socket | None) -> int:
    """Bytes that have already arrived and wait in the kernel (0 if unknown)."""
    if sock is None:
        return 0
    try:
        raw = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    return max(0, struct.unpack("i", raw)[0])


def _gate_bound(gate: Gate, timeout: float | None) -> tuple[float | None, Trip | None]:
    """The wait for the next connect or send: `timeout` or what the gate has left,
    whichever is shorter, and the deadline that binds it (None: the caller's own).
    A deadline already passed expires first (the watchdog may extend it)."""
    while True:
        deadline = gate.next_deadline()
        if deadline is None:
            return timeout, None
        left = deadline[0] - time.monotonic()
        if left <= 0:
            gate.expire(deadline[1])
            continue
        if timeout is None or left < timeout:
            return left, deadline[1]
        return timeout, None


class GatedStream(httpcore.NetworkStream):
    """Wraps a real network stream; every read obeys the current gate."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self._sock: socket.socket | None = inner.get_extra_info("socket")
        # Past a deadline: (that deadline, bytes that had already arrived when it passed).
        self._grace: tuple[tuple[float, Trip], int] | None = None

    def _grace_left(self, deadline: tuple[float, Trip]) -> int:
        """How much a slow consumer may still read past `deadline`.

        Exactly what was already waiting when the deadline was first seen to
        have passed: bytes that arrive later do not postpone the deadline, or a
        sender faster than its consumer (pings, a trickle) would outrun every
        deadline, the absolute stream cap included.
        """
        if self._grace is not None and self._grace[0] == deadline:
            return self._grace[1]
        waiting = _pending_bytes(self._sock)
        if waiting == 0 and _readable_now(self._sock):
            waiting = 1  # an EOF or error is waiting: one read reports it as it is
        self._grace = (deadline, waiting)
        return waiting

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        gate = current_gate()
        if gate is None or not gate.active:
            return self._inner.read(max_bytes, timeout)
        return self._gated_read(gate, max_bytes, timeout)

    def _gated_read(self, gate: Gate, max_bytes: int, timeout: float | None) -> bytes:
        gate.attach(self._sock)
        while True:
            deadline = gate.next_deadline()
            bound = timeout
            binding: Trip | None = None
            size = max_bytes
            grace = -1
            if deadline is not None:
                left = deadline[0] - time.monotonic()
                if left <= 0:
                    # A slow consumer is not a stalled server: take what had
                    # already arrived before declaring a timeout, and no more.
                    grace = self._grace_left(deadline)
                    if grace <= 0:
                        gate.expire(deadline[1])
                        continue
                    size = min(max_bytes, grace)
                    left = 0.001
                if timeout is None or left < timeout:
                    bound, binding = left, deadline[1]
            try:
                data = self._inner.read(size, bound)
            except httpcore.ReadTimeout:
                if binding is None:
                    raise  # the caller's own httpx read timeout
                gate.raise_if_tripped()
                gate.expire(binding)
                continue
            except (httpcore.ReadError, OSError):
                gate.raise_if_tripped()  # our own shutdown: report why, not a read error
                raise
            # After our own shutdown a read returns b"" (a clean EOF): never let
            # that look like the server ending the stream.
            gate.raise_if_tripped()
            if grace > 0 and deadline is not None:
                self._grace = (deadline, grace - max(len(data), 1))
            gate.note_bytes(len(data))
            return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        gate = current_gate()
        if gate is None or not gate.active or self._sock is None:
            self._inner.write(buffer, timeout)
            return
        gate.attach(self._sock)
        self._gated_write(gate, self._sock, memoryview(buffer), timeout)

    @staticmethod
    def _gated_write(
        gate: Gate, sock: socket.socket, data: memoryview, timeout: float | None
    ) -> None:
        """Send everything, each `send` bounded by what the gate has left.

        The first-token deadline bounds the write too: a server that accepts and
        never reads must fire at the first-token budget, not at httpx's write
        timeout. Like httpcore's own write, one `send` at a time, so a timeout
        never loses track of what was sent.
        """
        while data:
            bound, binding = _gate_bound(gate, timeout)
            try:
                sock.settimeout(bound)
                sent = sock.send(data)
            except TimeoutError as exc:
                if binding is None:
                    raise httpcore.WriteTimeout(exc) from exc  # the caller's own write timeout
                gate.raise_if_tripped()
                gate.expire(binding)
                continue
            except OSError as exc:
                gate.raise_if_tripped()  # our own shutdown: report why, not a write error
                raise httpcore.WriteError(exc) from exc
            data = data[sent:]

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return GatedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class GatedBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, with every stream wrapped in `GatedStream`."""

    def __init__(self, inner: httpcore.NetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        gate = current_gate()
        if gate is None or not gate.active:
            return GatedStream(
                self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
            )
        gate.raise_if_tripped()
        # The first-token deadline runs from the request, connect included: a
        # server whose accept queue is full must not get the connect timeout on top.
        while True:
            bound, binding = _gate_bound(gate, timeout)
            try:
                stream = self._inner.connect_tcp(host, port, bound, local_address, socket_options)
            except httpcore.ConnectTimeout:
                if binding is None:
                    raise
                gate.raise_if_tripped()
                gate.expire(binding)
                continue
            gate.raise_if_tripped()
            return GatedStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return GatedStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)
