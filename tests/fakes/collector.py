"""Broken OTLP collectors on real loopback sockets: one that answers 500 to
every export, one that reads the request and never answers, and an address
where nothing listens."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.serving import Serving


class _Failing(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        return None

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.exports += 1  # type: ignore[attr-defined]
        body = b"collector broken"
        self.send_response(500)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _FailingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Failing)
        self.exports = 0


class FailingCollector(Serving):
    """Answers every OTLP export with 500."""

    def __init__(self) -> None:
        self._server = _FailingServer()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    @property
    def exports(self) -> int:
        return int(self._server.exports)


class HangingCollector:
    """Accepts exports, reads them, and never answers while the block runs;
    `holding` counts the requests it holds open."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self.received = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1/traces"

    @property
    def holding(self) -> int:
        return len(self._held)

    def _accept(self) -> None:
        self._sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            try:
                conn.recv(65536)  # the request's first bytes; no answer, ever
            except OSError:
                pass
            self._held.append(conn)
            self.received.set()

    def __enter__(self) -> HangingCollector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        for conn in self._held:
            conn.close()
        self._sock.close()


def nothing_listening() -> str:
    """A traces URL on a loopback port where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1/traces"


class MemoryExporter:
    """Keeps every batch the export thread hands it (a `telemetry.SpanExporter`
    for tests that read spans back in-process)."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.batches = 0

    def __call__(self, spans: Any) -> bool:
        self.batches += 1
        self.spans.extend(spans)
        return True
