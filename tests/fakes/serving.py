"""What the loopback fakes share: a JSON answer, and serving a
`ThreadingHTTPServer` on a thread for the length of a `with` block."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def read_json(handler: BaseHTTPRequestHandler) -> Any:
    """The request's JSON body, recorded in `handler.server.requests` with its path
    and headers."""
    body = json.loads(handler.rfile.read(int(handler.headers.get("Content-Length") or 0)))
    handler.server.requests.append(  # type: ignore[attr-defined]
        {"path": handler.path, "headers": dict(handler.headers), "body": body}
    )
    return body


def send_json(handler: BaseHTTPRequestHandler, status: int, doc: Any) -> None:
    data = json.dumps(doc).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class Serving:
    """`with` serves `self._server` on a daemon thread; leaving stops it, first
    setting `self._server.stop` (an Event) when the server has one."""

    _server: ThreadingHTTPServer

    def __enter__(self) -> Any:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        stop = getattr(self._server, "stop", None)
        if isinstance(stop, threading.Event):
            stop.set()
        self._server.shutdown()
        self._server.server_close()
        deadline = time.monotonic() + 2
        while self._thread.is_alive() and time.monotonic() < deadline:
            self._thread.join(0.1)
