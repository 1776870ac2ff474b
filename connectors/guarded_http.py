"""HTTP requests to URLs that come from a workflow: the address policy enforced at
connect time, honest deadlines, response size caps, and a cancel that really
unblocks the socket.

- Every connection (the first request and every redirect hop) resolves the host
  here, checks *each* resolved address with the `NetworkPolicy`, and connects to
  the address it checked: a DNS answer that changes between check and connect
  (rebinding) is never used. Proxies from the environment are ignored
  (`trust_env=False`): a proxy would connect on our behalf, past the check.
- Redirects are followed the way httpx follows them (303 becomes GET, the
  Authorization header is dropped on a cross-origin hop), at most
  `max_redirects` hops.
- Connect, write and per-read timeouts are httpx's; on top, the whole exchange
  has a total deadline, so a server that trickles one byte per read timeout is
  cut off.
- The body is read in chunks and counted after decoding: over the cap (text and
  binary separately) is an error naming the limit, never a truncated body. A
  declared Content-Length over the cap fails before the body is read. A
  compressed body (gzip, deflate: the codings the client asks for) is inflated
  here at most `_CHUNK` bytes per step, so a few kilobytes of a compression bomb
  never become megabytes in memory before the cap sees them.
"""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import functools
import mimetypes
import re
import socket
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from email.message import Message
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx
from firstgate.common.cancel import Cancellable
from firstgate.common.redaction import safe_url
from firstgate.common.socket_scope import ScopedBackend, shutdown
from firstgate.common.telemetry import client_span, with_traceparent
from firstgate.connectors.errors import (
    ConnectorError,
    HttpTimeoutError,
    HttpTransportError,
    InvalidURLError,
    RequestCancelledError,
    ResponseTooLargeError,
    TooManyRedirectsError,
)
from firstgate.connectors.net_policy import NetworkPolicy

# Dify's defaults (HTTP_REQUEST_NODE_MAX_TEXT_SIZE / _MAX_BINARY_SIZE, the
# HTTP_REQUEST_MAX_*_TIMEOUT settings).
DEFAULT_MAX_TEXT_BYTES = 1024 * 1024
DEFAULT_MAX_BINARY_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_REDIRECTS = 20  # what httpx (and so Dify's ssrf_proxy) follows
MAX_CONNECT_TIMEOUT_S = 10
MAX_READ_TIMEOUT_S = 600
MAX_WRITE_TIMEOUT_S = 600

_SNIFF_BYTES = 1024
_CHUNK = 64 * 1024
# The content codings the client asks for and inflates itself, bounded (httpx
# would inflate a whole network chunk at once: 64 KiB of gzip can be 64 MiB).
ACCEPT_ENCODING = "gzip, deflate"
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float = MAX_CONNECT_TIMEOUT_S
    read: float = MAX_READ_TIMEOUT_S
    write: float = MAX_WRITE_TIMEOUT_S

    @property
    def total(self) -> float:
        return self.connect + self.write + self.read


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_redirects: int = DEFAULT_MAX_REDIRECTS
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES
    max_binary_bytes: int = DEFAULT_MAX_BINARY_BYTES


@dataclass(slots=True)
class HttpReply:
    status_code: int
    headers: dict[str, str]
    content: bytes
    url: str  # the final URL (after redirects), without credentials
    is_file: bool
    content_type: str = ""

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        charset = _charset(self.content_type) or "utf-8"
        try:
            codecs.lookup(charset)
        except LookupError:
            charset = "utf-8"
        return self.content.decode(charset, errors="replace")

    @property
    def filename(self) -> str | None:
        disposition = _disposition(self.headers.get("content-disposition", ""))
        return disposition.get_filename() if disposition else None


# --- classification: does the body become a file? (Dify's rules) ---------------

_TEXT_APPLICATION_TYPES = ("json", "xml", "javascript", "x-www-form-urlencoded", "yaml", "graphql")
_TEXT_MARKERS = (b"{", b"[", b"<", b"function", b"var ", b"const ", b"let ")
_FILE_MAIN_TYPES = ("application", "image", "audio", "video")


def _disposition(value: str) -> Message | None:
    if not value:
        return None
    message = Message()
    message["content-disposition"] = value
    return message


def _charset(content_type: str) -> str | None:
    message = Message()
    message["content-type"] = content_type
    charset = message.get_param("charset")
    return str(charset) if isinstance(charset, str) else None


def _decided_by_headers(headers: Mapping[str, str]) -> bool | None:
    """True: a file; False: text; None: the first bytes decide."""
    disposition = _disposition(headers.get("content-disposition", ""))
    if disposition is not None and (
        disposition.get_content_disposition() == "attachment" or disposition.get_filename()
    ):
        return True
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type.startswith("text/") and "csv" not in content_type:
        return False
    if content_type.startswith("application/"):
        # Dify tests these as substrings, which makes every Office document
        # (`vnd.openxmlformats-...`) text; whole name parts keep `rss+xml`,
        # `x-javascript` or `ld+json` text and an Office document a file.
        parts = set(re.split(r"[.+-]", content_type.split("/", 1)[1]))
        subtype = content_type.split("/", 1)[1]
        if subtype in _TEXT_APPLICATION_TYPES or parts & set(_TEXT_APPLICATION_TYPES):
            return False
        return None
    return _by_mime_type(content_type)


def _by_mime_type(content_type: str) -> bool:
    main_type, _ = mimetypes.guess_type("dummy" + (mimetypes.guess_extension(content_type) or ""))
    if main_type:
        return main_type.split("/")[0] in _FILE_MAIN_TYPES
    return any(kind in content_type for kind in ("image/", "audio/", "video/"))


def is_file_response(headers: Mapping[str, str], sample: bytes) -> bool:
    """Whether Dify would turn this response into a file (`sample`: its first bytes)."""
    decided = _decided_by_headers(headers)
    if decided is not None:
        return decided
    head = sample[:_SNIFF_BYTES]
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        looks_textual = False
    else:
        looks_textual = any(marker in head for marker in _TEXT_MARKERS)
    if looks_textual:
        return False
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    return _by_mime_type(content_type)


# --- one request's deadline and cancel, seen by the socket layer ----------------


class _Call:
    """One request's socket scope (`common/socket_scope.py`): one total deadline
    and the run's cancel, over every socket the request uses (each redirect hop
    may open one). The stream and the connects that obey it are the gate's."""

    active = True

    def __init__(self, total_s: float) -> None:
        self.deadline = time.monotonic() + total_s
        self.total_s = total_s
        self.cancelled: str | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    def next_deadline(self) -> tuple[float, str]:
        return self.deadline, "total"

    def expire(self, which: object) -> None:
        raise HttpTimeoutError("errors.http.totalTimeout", seconds=round(self.total_s, 3))

    def raise_if_tripped(self) -> None:
        if self.cancelled is not None:
            raise RequestCancelledError(reason=self.cancelled)

    def attach(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._sockets.add(sock)
            cancelled = self.cancelled
        if cancelled is not None:
            shutdown(sock)

    def note_bytes(self, count: int) -> None:
        return None

    def cancel(self, reason: str) -> None:
        with self._lock:
            self.cancelled = reason
            sockets = list(self._sockets)
        for sock in sockets:
            shutdown(sock)


_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("guarded_call", default=None)


def _checked_addresses(policy: NetworkPolicy, host: str, port: int) -> list[str]:
    """Every address `host` resolves to, each checked: none may be refused."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        policy.check(host, port, address)
    return addresses


class _PolicyBackend(ScopedBackend):
    """Resolves, checks every resolved address, and connects to a checked one;
    every connect and every stream obeys the current call. A workflow's request
    never goes to a unix socket."""

    def __init__(self, policy: NetworkPolicy) -> None:
        super().__init__(_CALL.get, functools.partial(_checked_addresses, policy))

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("a workflow's request goes to a checked address only")


class _GuardedTransport(httpx.HTTPTransport):
    """httpx's own transport (its request handling and exception mapping) over a
    connection pool built with the policy backend: `HTTPTransport` takes no
    network backend, so its pool is replaced right after it is built."""

    def __init__(self, policy: NetworkPolicy, *, verify: bool) -> None:
        super().__init__(verify=verify, trust_env=False)
        ssl_context = self._pool._ssl_context  # type: ignore[attr-defined]
        self._pool.close()
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=_PolicyBackend(policy),
        )


@dataclass(slots=True)
class RequestSpec:
    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    params: list[tuple[str, str]] | None = None
    content: str | bytes | None = None
    data: dict[str, str] | None = None
    files: list[tuple[str, tuple[str | None, bytes, str]]] | None = None
    json: Any = None


class GuardedHttp:
    """One per settings file: pooled clients (with and without TLS verification)
    that share the policy and the limits."""

    def __init__(self, policy: NetworkPolicy | None = None, limits: HttpLimits | None = None):
        self.policy = policy or NetworkPolicy()
        self.limits = limits or HttpLimits()
        self._clients: dict[bool, httpx.Client] = {}
        self._lock = threading.Lock()

    def _client(self, verify: bool) -> httpx.Client:
        with self._lock:
            client = self._clients.get(verify)
            if client is None:
                client = self._clients[verify] = httpx.Client(
                    transport=_GuardedTransport(self.policy, verify=verify),
                    follow_redirects=True,
                    max_redirects=self.limits.max_redirects,
                    trust_env=False,
                    headers={"Accept-Encoding": ACCEPT_ENCODING},
                )
            return client

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()

    def request(
        self,
        spec: RequestSpec,
        *,
        timeouts: Timeouts | None = None,
        verify: bool = True,
        cancel: Cancellable | None = None,
    ) -> HttpReply:
        """Send `spec`; raise a `ConnectorError` subclass on any failure."""
        timeouts = timeouts or Timeouts()
        scheme = urlsplit(spec.url).scheme.lower() if "://" in spec.url else ""
        if scheme not in ("http", "https"):
            raise InvalidURLError(
                url=safe_url(spec.url), detail="the URL must start with http:// or https://"
            )
        call = _Call(timeouts.total)
        token = _CALL.set(call)
        span = client_span(
            f"HTTP {spec.method.upper()}",
            {"http.request.method": spec.method.upper(), "url.full": safe_url(spec.url)},
        )
        try:
            with (
                span as traced,
                cancel.attached(call.cancel) if cancel is not None else contextlib.nullcontext(),
            ):
                reply = self._send(spec, timeouts, verify, call)
                if traced is not None:
                    traced.set_attribute("http.response.status_code", reply.status_code)
                return reply
        except ConnectorError:
            raise
        except httpx.TooManyRedirects:
            raise TooManyRedirectsError(
                limit=self.limits.max_redirects,
            ) from None
        except httpx.TimeoutException as exc:
            call.raise_if_tripped()
            phase = {
                httpx.ConnectTimeout: "connect",
                httpx.ReadTimeout: "read",
                httpx.WriteTimeout: "write",
                httpx.PoolTimeout: "connect",
            }.get(type(exc), "read")
            seconds = getattr(timeouts, phase)
            raise HttpTimeoutError(phase=phase, seconds=seconds) from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise InvalidURLError(url=safe_url(spec.url), detail=str(exc)[:200]) from None
        except (httpx.HTTPError, httpx.StreamError) as exc:
            call.raise_if_tripped()
            raise HttpTransportError(
                url=safe_url(spec.url),
                detail=str(exc)[:300] or type(exc).__name__,
            ) from None
        finally:
            _CALL.reset(token)

    def _send(self, spec: RequestSpec, timeouts: Timeouts, verify: bool, call: _Call) -> HttpReply:
        client = self._client(verify)
        timeout = httpx.Timeout(
            None, connect=timeouts.connect, read=timeouts.read, write=timeouts.write
        )
        with client.stream(
            spec.method.upper(),
            spec.url,
            headers=with_traceparent(spec.headers),
            params=spec.params,
            content=spec.content,
            data=spec.data,
            files=spec.files,
            json=spec.json,
            timeout=timeout,
        ) as response:
            headers = dict(response.headers)
            chunks = decoded(response.iter_raw(_CHUNK), headers.get("content-encoding", ""))
            content, is_file = self._read_body(chunks, headers)
            return HttpReply(
                status_code=response.status_code,
                headers=headers,
                content=content,
                url=safe_url(response.url),
                is_file=is_file,
                content_type=headers.get("content-type", ""),
            )

    def _cap(self, is_file: bool) -> tuple[int, str]:
        if is_file:
            return self.limits.max_binary_bytes, "binary"
        return self.limits.max_text_bytes, "text"

    def _too_large(self, is_file: bool) -> ResponseTooLargeError:
        limit, kind = self._cap(is_file)
        return ResponseTooLargeError(kind=kind, limit=limit)

    def _read_body(self, chunks: Iterator[bytes], headers: dict[str, str]) -> tuple[bytes, bool]:
        decided = _decided_by_headers(headers)
        declared = headers.get("content-length", "")
        if decided is not None and declared.isdigit() and "content-encoding" not in headers:
            if int(declared) > self._cap(decided)[0]:
                raise self._too_large(decided)
        # Until the first bytes decide, the larger (binary) cap bounds the read.
        limit = self._cap(True if decided is None else decided)[0]
        body = bytearray()
        for chunk in chunks:
            body += chunk
            if len(body) > limit:
                if decided is None and len(body) >= _SNIFF_BYTES:
                    decided = is_file_response(headers, bytes(body[:_SNIFF_BYTES]))
                raise self._too_large(True if decided is None else decided)
            if decided is None and len(body) >= _SNIFF_BYTES:
                decided = is_file_response(headers, bytes(body[:_SNIFF_BYTES]))
                limit = self._cap(decided)[0]
                if len(body) > limit:
                    raise self._too_large(decided)
        if decided is None:
            decided = is_file_response(headers, bytes(body))
            if len(body) > self._cap(decided)[0]:
                raise self._too_large(decided)
        return bytes(body), decided


def decoded(raw: Iterable[bytes], content_encoding: str) -> Iterator[bytes]:
    """The body with its content codings undone as httpx undoes them (the last
    applied first; codings it does not know are left as they are), in pieces of
    at most `_CHUNK` bytes however much one compressed chunk expands."""
    chunks: Iterator[bytes] = iter(raw)
    for coding in reversed(content_encoding.split(",")):
        wbits = _WBITS.get(coding.strip().lower())
        if wbits is not None:
            chunks = _inflate(chunks, wbits)
    return chunks


def _inflate(chunks: Iterator[bytes], wbits: int) -> Iterator[bytes]:
    inflater = zlib.decompressobj(wbits)
    started = False
    for chunk in chunks:
        pending = chunk
        while pending and not inflater.eof:
            try:
                out = inflater.decompress(pending, _CHUNK)
            except zlib.error as exc:
                if not started and wbits == zlib.MAX_WBITS:
                    # "deflate" sent without its zlib wrapper: httpx accepts it too
                    wbits = -zlib.MAX_WBITS
                    inflater = zlib.decompressobj(wbits)
                    continue
                raise httpx.DecodingError(f"the {_coding(wbits)} body is corrupt: {exc}") from None
            started = True
            pending = inflater.unconsumed_tail
            if out:
                yield out
    # What the last step's limit held back.
    while not inflater.eof:
        out = inflater.decompress(b"", _CHUNK)
        if not out:
            break
        yield out


def _coding(wbits: int) -> str:
    return "gzip" if wbits > zlib.MAX_WBITS else "deflate"
