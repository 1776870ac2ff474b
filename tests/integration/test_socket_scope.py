"""The one socket scope (`common/socket_scope.py`), over a real socket pair, in
threads and (second run) under gevent: what every scope gets from the stream,
whichever deadlines it keeps. The gate and the guarded HTTP client are its two
scopes; their own behaviour is tested with their tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpcore
import pytest
from firstgate.common.socket_scope import ScopedBackend, ScopedStream, shutdown
from firstgate.connectors import guarded_http
from firstgate.connectors.net_policy import NetworkPolicy
from firstgate.plugin_daemon_client.gate import Gate, current_gate
from firstgate.plugin_daemon_client.transport import GatedTransport
from httpcore._backends.sync import SyncStream


class Ended(Exception):
    pass


class Scope:
    """A scope with one deadline `seconds` from now; `extend` expiries move it
    (the gate's watchdog), then it ends the stream."""

    active = True

    def __init__(self, seconds: float, extend: int = 0) -> None:
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.extend = extend
        self.expired: list[Any] = []
        self.ended: str | None = None
        self.sock: socket.socket | None = None
        self.received = 0

    def next_deadline(self) -> tuple[float, str]:
        return self.deadline, "total"

    def expire(self, which: Any) -> None:
        self.expired.append(which)
        if len(self.expired) <= self.extend:
            self.deadline = time.monotonic() + self.seconds
            return
        self.ended = self.ended or "deadline"
        raise Ended(self.ended)

    def raise_if_tripped(self) -> None:
        if self.ended is not None:
            raise Ended(self.ended)

    def attach(self, sock: socket.socket | None) -> None:
        self.sock = sock
        self.raise_if_tripped()

    def note_bytes(self, count: int) -> None:
        self.received += count

    def cancel(self) -> None:
        self.ended = "cancelled"
        if self.sock is not None:
            shutdown(self.sock)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    yield ours, theirs
    for sock in (ours, theirs):
        sock.close()


def scoped(sock: socket.socket, scope: Scope | None) -> ScopedStream:
    return ScopedStream(SyncStream(sock), lambda: scope)


def test_the_gate_and_the_guarded_client_share_the_stream_and_backend() -> None:
    gated = GatedTransport()
    guarded = guarded_http._GuardedTransport(NetworkPolicy(), verify=True)
    try:
        for pool in (gated._pool, guarded._pool):
            assert isinstance(pool._network_backend, ScopedBackend)
        assert gated._pool._network_backend.scope is current_gate
        assert guarded._pool._network_backend.scope == guarded_http._CALL.get
    finally:
        gated.close()
        guarded.close()
    # Both are scopes: the gate's richer deadlines and the call's one total.
    for kind in (Gate, guarded_http._Call):
        for name in ("next_deadline", "expire", "raise_if_tripped", "attach", "note_bytes"):
            assert callable(getattr(kind, name)), (kind, name)


def test_outside_a_scope_a_read_is_plain(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    theirs.sendall(b"hello")
    assert scoped(ours, None).read(100) == b"hello"
    with pytest.raises(httpcore.ReadTimeout):
        scoped(ours, None).read(100, timeout=0.05)


def test_a_read_waits_for_the_scope_and_its_extensions(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, _theirs = pair
    scope = Scope(0.1, extend=2)
    start = time.monotonic()
    with pytest.raises(Ended, match="deadline"):
        scoped(ours, scope).read(100, timeout=30)
    took = time.monotonic() - start
    assert scope.expired == ["total"] * 3
    assert 0.28 <= took < 1.5, took  # three windows, not the caller's 30 s


def test_the_callers_own_timeout_stays_the_callers(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, _theirs = pair
    scope = Scope(30)
    with pytest.raises(httpcore.ReadTimeout):
        scoped(ours, scope).read(100, timeout=0.05)
    assert scope.expired == []


def test_past_a_deadline_only_what_had_arrived_is_read(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    scope = Scope(0.05)
    stream = scoped(ours, scope)
    theirs.sendall(b"0123456789")
    time.sleep(0.1)  # the deadline passes with 10 bytes waiting
    assert stream.read(4) == b"0123"
    theirs.sendall(b"late")  # arrived after the deadline: never postpones it
    assert stream.read(100) == b"456789"
    with pytest.raises(Ended):
        stream.read(100)
    assert scope.received == 10


def test_a_cancel_unblocks_a_read_and_is_reported_as_itself(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, _theirs = pair
    scope = Scope(30)
    threading.Timer(0.1, scope.cancel).start()
    start = time.monotonic()
    with pytest.raises(Ended, match="cancelled"):
        scoped(ours, scope).read(100)  # a shut socket reads b"": never an empty success
    assert time.monotonic() - start < 5


def test_a_write_the_peer_never_reads_meets_the_scope(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, _theirs = pair
    scope = Scope(0.2)
    start = time.monotonic()
    with pytest.raises(Ended, match="deadline"):
        scoped(ours, scope).write(b"x" * 64 * 1024 * 1024, timeout=30)
    assert time.monotonic() - start < 5


def test_a_connect_is_bounded_by_the_scope_and_attached() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    scope = Scope(30)
    backend = ScopedBackend(lambda: scope)
    with contextlib.closing(listener):
        stream = backend.connect_tcp("127.0.0.1", port, timeout=5)
        assert scope.sock is stream.get_extra_info("socket")  # a cancel reaches the handshake
        stream.close()
        scope.ended = "cancelled"
        with pytest.raises(Ended, match="cancelled"):
            backend.connect_tcp("127.0.0.1", port, timeout=5)


def test_the_guarded_call_is_one_total_deadline_and_a_cancel(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, _theirs = pair
    call = guarded_http._Call(0.1)
    stream = ScopedStream(SyncStream(ours), lambda: call)
    with pytest.raises(guarded_http.HttpTimeoutError, match="0.1"):
        stream.read(100, timeout=30)
    call = guarded_http._Call(10)
    stream = ScopedStream(SyncStream(ours), lambda: call)
    threading.Timer(0.1, call.cancel, args=("stopped",)).start()
    start = time.monotonic()
    with pytest.raises(guarded_http.RequestCancelledError):
        stream.read(100)
    assert time.monotonic() - start < 5  # the cancel shut the socket: no waiting out the total
