"""What one client connection may cost `firstgate serve` before it has asked
for anything: pywsgi by itself waits forever for a request line and its
headers, so a client that opens connections and sends a byte a minute
(slowloris) would hold a greenlet and a socket each, with no end.

- `idle_s`: how long a connection may stay silent before its next request's
  first byte (a new connection, or a keep-alive one between requests);
- `header_s`: from that first byte, how long the request line and all the
  headers may take to arrive; past it the client gets 408 and the connection
  closes;
- `max_connections`: open connections at once; past it the server stops
  accepting (new ones wait in the listen backlog) until one closes.

Neither timeout touches a request once its headers are in: a streaming
answer can run as long as the run does.

Every connection also sends without Nagle's delay (`TCP_NODELAY`): an answer
goes out in several small writes (headers, each event, the closing chunk), and
with Nagle on, a write that follows an unacknowledged one waits for the
client's delayed ACK (about 40 ms on Linux): the end of a stopped stream came
that late at the 99th percentile.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

import gevent
from gevent.pool import Pool
from gevent.pywsgi import WSGIHandler

DEFAULT_IDLE_S = 75.0  # above the keep-alive of common client pools (60 s)
DEFAULT_HEADER_S = 15.0
DEFAULT_MAX_CONNECTIONS = 4096

_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    idle_s: float = DEFAULT_IDLE_S
    header_s: float = DEFAULT_HEADER_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def pool(self) -> Pool:
        """The greenlet pool a server spawns its connections in: its size is the cap."""
        return Pool(self.max_connections)

    def handler(self) -> type[WSGIHandler]:
        limits = self

        class Handler(BoundedHandler):
            pass

        Handler.limits = limits
        return Handler


class HeadTimeout(Exception):
    """The request line and headers did not arrive in time (an Exception, so that
    pywsgi's own client-error path sees it)."""


class BoundedHandler(WSGIHandler):
    limits: ConnectionLimits = ConnectionLimits()
    _head_timer: gevent.Timeout | None = None

    def __init__(self, sock: Any, address: Any, server: Any, rfile: Any = None) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().__init__(sock, address, server, rfile)

    def read_requestline(self) -> str:
        try:
            with gevent.Timeout(self.limits.idle_s, HeadTimeout):
                if not self.rfile.peek(1):
                    return ""  # the client closed the connection
        except HeadTimeout:
            return ""  # idle too long: close without a word, as after keep-alive
        self._head_timer = gevent.Timeout.start_new(self.limits.header_s, HeadTimeout)
        try:
            return super().read_requestline()
        except HeadTimeout:
            self._cancel_head_timer()
            return ""

    def read_request(self, raw_requestline: str) -> Any:
        try:
            return super().read_request(raw_requestline)
        finally:
            self._cancel_head_timer()

    def handle_one_request(self) -> Any:
        try:
            return super().handle_one_request()
        finally:
            self._cancel_head_timer()

    def _handle_client_error(self, ex: Exception) -> Any:
        if isinstance(ex, HeadTimeout):
            return ("408", _TIMED_OUT)
        return super()._handle_client_error(ex)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
