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

import select
import socket
import time
from collections.abc import Iterable
from typing import Any

import httpcore

from .gate import Gate, current_gate


def _readable_now(sock: socket.socket | None) -> bool:
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True  # let the read itself report the broken socket
    return bool(readable)


class GatedStream(httpcore.NetworkStream):
    """Wraps a real network stream; every read obeys the current gate."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self._sock: socket.socket | None = inner.get_extra_info("socket")

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
            gate_binds = False
            if deadline is not None:
                left = deadline[0] - time.monotonic()
                if left <= 0:
                    # A slow consumer is not a stalled server: take what is
                    # already waiting on the socket before declaring a timeout.
                    if not _readable_now(self._sock):
                        gate.expire(deadline[1])
                        continue
                    left = 0.001
                if timeout is None or left < timeout:
                    bound, gate_binds = left, True
            try:
                data = self._inner.read(max_bytes, bound)
            except httpcore.ReadTimeout:
                if not gate_binds:
                    raise  # the caller's own httpx read timeout
                gate.raise_if_tripped()
                gate.expire(deadline[1])  # type: ignore[index]
                continue
            except (httpcore.ReadError, OSError):
                gate.raise_if_tripped()  # our own shutdown: report why, not a read error
                raise
            # After our own shutdown a read returns b"" (a clean EOF): never let
            # that look like the server ending the stream.
            gate.raise_if_tripped()
            gate.note_bytes(len(data))
            return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        gate = current_gate()
        if gate is not None and gate.active:
            gate.attach(self._sock)
        self._inner.write(buffer, timeout)

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
        if gate is not None:
            gate.raise_if_tripped()
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
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
