"""One socket-level scope: what bounds a socket now, and the httpcore stream that
obeys it.

httpcore copies a read timeout once per response and calls `settimeout`
before every `recv`, so nothing above the socket can end a stream at a
deadline of its own (or switch a stream from one deadline to another mid-way).
Its `network_backend` hook can: every connect, send and read of a
`ScopedStream` is bounded by `min(timeout, what the current scope has left)`,
and a wait that ends on the scope's bound is handed to the scope
(`expire(which)`) *inside* the stream, before httpcore sees it: the scope
either ends the stream (raises) or moves its deadline (returns), and the
stream goes on waiting on the same connection.

A `SocketScope` is looked up when a socket is used (a ContextVar getter,
passed in), so no layer between the caller and the socket takes a parameter.
Two implement it: the first-token gate (`plugin_daemon_client/gate.py`:
first-token, idle, stream-total and attempt deadlines, probes that extend the
wait) and the guarded HTTP client's per-request call
(`connectors/guarded_http.py`: one total deadline and the run's cancel).
Outside a scope (or in one not started yet) the stream is plain httpcore.

Rules every scope gets from the stream, whatever its deadlines:
- A cancel shuts the attached socket down; a read or write that fails (or
  returns a clean EOF) after that reports the scope's reason, never a
  transport error or an empty success (`raise_if_tripped` after each wait).
- A slow consumer is not a stalled server: past a deadline, the bytes that
  had already arrived when it was first seen to have passed are still read,
  and no more (bytes arriving later never postpone a deadline).
- The caller's own httpx timeout stays the caller's: a wait bounded by it
  raises httpcore's timeout as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import select
import socket
import struct
import termios
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import httpcore

# (monotonic instant, which deadline): `which` is the scope's own name for it.
Deadline = tuple[float, Any]


class SocketScope(Protocol):
    """What bounds the sockets of the request running in this context now."""

    @property
    def active(self) -> bool:
        """Whether the scope bounds sockets yet (False: plain httpcore)."""
        ...

    def next_deadline(self) -> Deadline | None:
        """The earliest deadline that binds now, and which it is (None: none)."""
        ...

    def expire(self, which: Any) -> None:
        """The wait bounded by deadline `which` ran out: return to go on waiting
        (the scope moved it), or raise the scope's error to end the stream."""
        ...

    def raise_if_tripped(self) -> None:
        """Raise the scope's error if it already ended (a cancel, a deadline)."""
        ...

    def attach(self, sock: socket.socket | None) -> None:
        """The socket in use now: a cancel shuts it down. Raises (or shuts it
        down at once) when the scope already ended."""
        ...

    def note_bytes(self, count: int) -> None:
        """`count` bytes arrived (an idle deadline runs from the last byte)."""
        ...


ScopeLookup = Callable[[], SocketScope | None]


def shutdown(sock: socket.socket) -> None:
    """Unblock every wait on `sock` (from any thread or greenlet)."""
    with contextlib.suppress(OSError):  # already closed or never connected
        sock.shutdown(socket.SHUT_RDWR)


def wait_bound(scope: SocketScope, timeout: float | None) -> tuple[float | None, Any]:
    """The bound of the next wait: `timeout` or what the scope has left, whichever
    is shorter, and the deadline that binds it (None: the caller's own). A
    deadline already passed expires first (the scope may move it)."""
    while True:
        deadline = scope.next_deadline()
        if deadline is None:
            return timeout, None
        left = deadline[0] - time.monotonic()
        if left <= 0:
            scope.expire(deadline[1])
            continue
        if timeout is None or left < timeout:
            return left, deadline[1]
        return timeout, None


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


class ScopedStream(httpcore.NetworkStream):
    """Wraps a real network stream; every read and write obeys the current scope."""

    def __init__(self, inner: httpcore.NetworkStream, scope: ScopeLookup) -> None:
        self._inner = inner
        self._scope = scope
        self._sock: socket.socket | None = inner.get_extra_info("socket")
        # Past a deadline: (that deadline, bytes that had already arrived when it passed).
        self._grace: tuple[Deadline, int] | None = None

    def _grace_left(self, deadline: Deadline) -> int:
        """How much a slow consumer may still read past `deadline`.

        Exactly what was already waiting when the deadline was first seen to
        have passed: bytes that arrive later do not postpone the deadline, or a
        sender faster than its consumer (pings, a trickle) would outrun every
        deadline, an absolute cap included.
        """
        if self._grace is not None and self._grace[0] == deadline:
            return self._grace[1]
        waiting = _pending_bytes(self._sock)
        if waiting == 0 and _readable_now(self._sock):
            waiting = 1  # an EOF or error is waiting: one read reports it as it is
        self._grace = (deadline, waiting)
        return waiting

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        scope = self._scope()
        if scope is None or not scope.active:
            return self._inner.read(max_bytes, timeout)
        scope.attach(self._sock)
        while True:
            deadline = scope.next_deadline()
            bound = timeout
            binding: Any = None
            size = max_bytes
            grace = -1
            if deadline is not None:
                left = deadline[0] - time.monotonic()
                if left <= 0:
                    # Take what had already arrived before declaring a timeout, and no more.
                    grace = self._grace_left(deadline)
                    if grace <= 0:
                        scope.expire(deadline[1])
                        continue
                    size = min(max_bytes, grace)
                    left = 0.001
                if timeout is None or left < timeout:
                    bound, binding = left, deadline[1]
            try:
                data = self._inner.read(size, bound)
            except httpcore.ReadTimeout:
                scope.raise_if_tripped()
                if binding is None:
                    raise  # the caller's own httpx read timeout
                scope.expire(binding)
                continue
            except (httpcore.ReadError, OSError):
                scope.raise_if_tripped()  # our own shutdown: report why, not a read error
                raise
            # After our own shutdown a read returns b"" (a clean EOF): never let
            # that look like the server ending the stream.
            scope.raise_if_tripped()
            if grace > 0 and deadline is not None:
                self._grace = (deadline, grace - max(len(data), 1))
            scope.note_bytes(len(data))
            return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        scope = self._scope()
        if scope is None or not scope.active or self._sock is None:
            self._inner.write(buffer, timeout)
            return
        scope.attach(self._sock)
        self._scoped_write(scope, self._sock, memoryview(buffer), timeout)

    @staticmethod
    def _scoped_write(
        scope: SocketScope, sock: socket.socket, data: memoryview, timeout: float | None
    ) -> None:
        """Send everything, each `send` bounded by what the scope has left.

        The scope's deadlines bound the write too: a server that accepts and
        never reads must meet the scope's deadline, not httpx's write timeout.
        Like httpcore's own write, one `send` at a time, so a timeout never
        loses track of what was sent.
        """
        while data:
            bound, binding = wait_bound(scope, timeout)
            try:
                sock.settimeout(bound)
                sent = sock.send(data)
            except TimeoutError as exc:
                scope.raise_if_tripped()
                if binding is None:
                    raise httpcore.WriteTimeout(exc) from exc  # the caller's own write timeout
                scope.expire(binding)
                continue
            except OSError as exc:
                scope.raise_if_tripped()  # our own shutdown: report why, not a write error
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
        return ScopedStream(
            self._inner.start_tls(ssl_context, server_hostname, timeout), self._scope
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class ScopedBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, with every connect bounded by the current scope
    and every stream a `ScopedStream`.

    `addresses(host, port)`, when given, says where a host may be reached (the
    guarded HTTP client resolves and checks every answer there): each is tried
    in turn, and the connect goes to the address, never to the name again.
    """

    def __init__(
        self,
        scope: ScopeLookup,
        addresses: Callable[[str, int], Sequence[str]] | None = None,
        inner: httpcore.NetworkBackend | None = None,
    ) -> None:
        self.scope = scope
        self._addresses = addresses
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        scope = self.scope()
        if scope is not None and scope.active:
            scope.raise_if_tripped()
            wait_bound(scope, timeout)  # a scope already over resolves nothing
        else:
            scope = None
        targets = (host,) if self._addresses is None else self._addresses(host, port)
        error: httpcore.ConnectError | None = None
        for target in targets:
            try:
                stream = self._connect(scope, target, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                error = exc
                continue
            return ScopedStream(stream, self.scope)
        raise error or httpcore.ConnectError(f"no address for {host}")

    def _connect(
        self,
        scope: SocketScope | None,
        host: str,
        port: int,
        timeout: float | None,
        local_address: str | None,
        socket_options: Iterable[Any] | None,
    ) -> httpcore.NetworkStream:
        if scope is None:
            return self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        # The scope's deadlines run from the request, connect included: a server
        # whose accept queue is full gets no connect timeout on top.
        while True:
            bound, binding = wait_bound(scope, timeout)
            try:
                stream = self._inner.connect_tcp(host, port, bound, local_address, socket_options)
            except httpcore.ConnectTimeout:
                scope.raise_if_tripped()
                if binding is None:
                    raise
                scope.expire(binding)
                continue
            try:
                # From here a cancel shuts it down (the TLS handshake included).
                scope.attach(stream.get_extra_info("socket"))
                scope.raise_if_tripped()
            except BaseException:
                stream.close()
                raise
            return stream

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return ScopedStream(
            self._inner.connect_unix_socket(path, timeout, socket_options), self.scope
        )

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)
