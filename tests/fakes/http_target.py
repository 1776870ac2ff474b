"""A hostile HTTP target on a real loopback socket, for the http-request node.

Paths:
  /echo, /echo/...    JSON of the request: method, path, query, headers, body
  /json               a small JSON body
  /status/N           status N with a short text body
  /redirect?to=URL    302 to URL (`&code=307` for another status)
  /slow?delay=S       headers and body after S seconds
  /trickle?every=S    headers at once, then one byte every S seconds, forever
  /huge?mb=N          N MiB of text (N=1024: a gigabyte), streamed with Content-Length
  /liar-long          Content-Length 1000, sends 10 bytes and closes
  /liar-short         Content-Length 5, sends 50 bytes
  /file               a small PNG-typed body with a Content-Disposition filename
  /packed?mb=N&coding=C  N MiB of text compressed with C (gzip, deflate, raw-deflate
                      or a list like "gzip, gzip"): mb=100 is a compression bomb
  /docs/NAME          `documents[NAME]`: (content type, bytes)
Every request is recorded in `requests`.
"""

from __future__ import annotations

import functools
import json
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.serving import Serving

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "raw-deflate": -zlib.MAX_WBITS}


@functools.lru_cache(maxsize=8)
def packed(mb: float, coding: str) -> bytes:
    """`mb` MiB of one repeated line, compressed by each coding in turn
    (built a block at a time: the plain text is never all in memory)."""
    block = b"all work and no play\n" * 3000
    total = int(mb * 1024 * 1024)
    packer = zlib.compressobj(9, zlib.DEFLATED, _WBITS[coding.split(",")[0].strip()])
    parts: list[bytes] = []
    sent = 0
    while sent < total:
        piece = block[: total - sent]
        parts.append(packer.compress(piece))
        sent += len(piece)
    body = b"".join([*parts, packer.flush()])
    for more in coding.split(",")[1:]:
        again = zlib.compressobj(9, zlib.DEFLATED, _WBITS[more.strip()])
        body = again.compress(body) + again.flush()
    return body


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        return None

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes, content_type: str = "text/plain", **headers: str):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers.items():
            self.send_header(key.replace("_", "-"), value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        body = self._body()
        self.server.requests.append(
            {
                "method": self.command,
                "path": url.path,
                "query": query,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
            }
        )
        path = url.path
        if path == "/echo" or path.startswith("/echo/"):
            doc = {
                "method": self.command,
                "path": url.path,
                "query": parse_qs(url.query, keep_blank_values=True),
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode("utf-8", "replace"),
            }
            self._send(200, json.dumps(doc).encode(), "application/json")
        elif path == "/json":
            self._send(200, b'{"ok": true, "items": [1, 2]}', "application/json; charset=utf-8")
        elif path.startswith("/status/"):
            status = int(path.rsplit("/", 1)[1])
            self._send(status, f"status {status}".encode())
        elif path == "/redirect":
            self.send_response(int(query.get("code", "302")))
            self.send_header("Location", query["to"])
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/slow":
            self.server.stop.wait(float(query.get("delay", "5")))
            self._send(200, b"late")
        elif path == "/trickle":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            every = float(query.get("every", "0.2"))
            while not self.server.stop.wait(every):
                self.wfile.write(b"x")
                self.wfile.flush()
        elif path == "/huge":
            size = int(float(query.get("mb", "1024")) * 1024 * 1024)
            self.send_response(200)
            self.send_header("Content-Type", query.get("type", "text/plain"))
            if query.get("declare", "1") == "1":
                self.send_header("Content-Length", str(size))
            else:
                self.send_header("Connection", "close")
            self.end_headers()
            block = b"y" * 65536
            sent = 0
            try:
                while sent < size and not self.server.stop.is_set():
                    self.wfile.write(block)
                    sent += len(block)
                    self.server.huge_sent = sent
            except OSError:
                pass  # the client hung up: what the size cap should do
            self.close_connection = True
        elif path == "/liar-long":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"0123456789")
            self.close_connection = True
        elif path == "/liar-short":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"A" * 50)
            self.close_connection = True
        elif path == "/file":
            self._send(
                200,
                b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
                "image/png",
                Content_Disposition='attachment; filename="pixel.png"',
            )
        elif path == "/packed":
            coding = query.get("coding", "gzip")
            body = packed(float(query.get("mb", "1")), coding)
            shown = coding.replace("raw-deflate", "deflate")
            try:
                self._send(200, body, query.get("type", "text/plain"), Content_Encoding=shown)
            except OSError:
                self.close_connection = True  # the client hung up at its size cap
        elif path.startswith("/docs/"):
            name = path.rsplit("/", 1)[1]
            content = self.server.documents.get(name)
            if content is None:
                self._send(404, b"no such document")
            else:
                self._send(200, content[1], content[0])
        else:
            self._send(404, b"not found")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str) -> None:
        super().__init__((host, 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.huge_sent = 0
        self.documents: dict[str, tuple[str, bytes]] = {}


class HttpTarget(Serving):
    """`with HttpTarget() as target:` serves on 127.0.0.1 until the block ends."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._server = _Server(host)
        self.host = host
        self.port = self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._server.requests

    @property
    def documents(self) -> dict[str, tuple[str, bytes]]:
        """Served at /docs/NAME: NAME -> (content type, bytes)."""
        return self._server.documents

    @property
    def huge_sent(self) -> int:
        return self._server.huge_sent
