"""One access log line per request, on stderr, in the Common Log Format with the
duration and the app appended:

    127.0.0.1 - - [01/Dec/2025:16:08:00 +0000] "POST /v1/chat-messages HTTP/1.1" 200 1523 0.532 app=chat

Fields: the client's address, `-` (identity), `-` (user: firstgate has none of
its own), the time the request arrived, the request line, the status, the bytes
of the body sent (`-` when none), the seconds from arrival until the reply
ended (a stream: until its last event, or until the client went away) and the
app the key chose (`app=-` for the console and requests without a valid key).

What it never writes: the query string (`?user=...`, a file link's `sign`),
a header (the `Authorization: Bearer` key is one) or a body. `serve
--no-access-log` (or `FIRSTGATE_ACCESS_LOG=off` under gunicorn) turns it off.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

# Where the Service API puts the stem of the app a request's key chose.
APP_ENVIRON_KEY = "firstgate.app"
_PATH_LIMIT = 512  # a request line is quoted at most this long


class AccessLog:
    """WSGI middleware: `AccessLog(app)` serves as `app` does and logs each request."""

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.stream = stream
        self.clock = clock

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        started = self.clock()
        arrived = time.time()
        status: list[str] = []

        def recording_start_response(code: str, headers: Any, exc_info: Any = None) -> Any:
            status[:] = [code]
            return start_response(code, headers, exc_info)

        try:
            body = self.app(environ, recording_start_response)
        except BaseException:
            self._write(environ, arrived, "500", 0, started)
            raise
        return _Logged(
            body, lambda sent: self._write(environ, arrived, _code(status), sent, started)
        )

    def _write(
        self, environ: dict[str, Any], arrived: float, code: str, sent: int, started: float
    ) -> None:
        line = format_line(environ, arrived, code, sent, self.clock() - started)
        stream = self.stream or sys.stderr
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):  # a closed stderr must not fail the request
            pass


class _Logged:
    """The body, passed through; logs once when the server closes it."""

    def __init__(self, body: Iterable[bytes], done: Callable[[int], None]) -> None:
        self.body = body
        self.done = done
        self.sent = 0
        self.logged = False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.body:
            self.sent += len(chunk)
            yield chunk

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            if not self.logged:
                self.logged = True
                self.done(self.sent)


def _code(status: list[str]) -> str:
    return status[0].split(" ", 1)[0] if status else "500"


def format_line(
    environ: dict[str, Any], arrived: float, code: str, sent: int, seconds: float
) -> str:
    method = _clean(environ.get("REQUEST_METHOD", "-"))
    # The path only: a query string can carry a user id or a signature.
    path = _clean(_path(environ))[:_PATH_LIMIT]
    protocol = _clean(environ.get("SERVER_PROTOCOL", "HTTP/1.0"))
    when = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(arrived))
    client = _clean(environ.get("REMOTE_ADDR") or "-")
    app = _clean(environ.get(APP_ENVIRON_KEY) or "-")
    size = str(sent) if sent else "-"
    return (
        f'{client} - - [{when}] "{method} {path} {protocol}" {code} {size} {seconds:.3f} app={app}'
    )


def _path(environ: dict[str, Any]) -> str:
    path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
    # WSGI hands the path as latin-1 decoded bytes: show the UTF-8 the client sent.
    try:
        return path.encode("latin-1").decode("utf-8") or "/"
    except (UnicodeEncodeError, UnicodeDecodeError):
        return path or "/"


def _clean(text: object) -> str:
    """No control characters, quotes or spaces that would break a log line apart."""
    return "".join(
        "?" if (ch < " " or ch == "\x7f" or ch == '"' or ch == " ") else ch for ch in str(text)
    )
