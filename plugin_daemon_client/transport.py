"""An httpx transport over an httpcore pool whose backend obeys the current gate
(`common.socket_scope.ScopedBackend` over `current_gate`).

`httpx.HTTPTransport` takes no `network_backend`, so this is a small
BaseTransport of our own. httpcore exceptions are mapped onto httpx's the same
way httpx maps them, in `_HTTPCORE_TO_HTTPX`; the gate's own signal
(`GateTripped`) passes through untouched for the client to report.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
from collections.abc import Iterator

import httpcore
import httpx
from firstgate.common.socket_scope import ScopedBackend

from .gate import current_gate

# Most specific first: the first match wins.
_HTTPCORE_TO_HTTPX: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for source, target in _HTTPCORE_TO_HTTPX:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise  # not an httpcore error (e.g. GateTripped): pass it on unchanged


@functools.cache
def _shared_ssl_context(verify: bool) -> ssl.SSLContext:
    """One default context per process: building one loads the CA store (tens of ms),
    which a workflow run that opens a client per route would otherwise pay every time."""
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class _GatedResponseStream(httpx.SyncByteStream):
    def __init__(self, inner: httpcore.Response) -> None:
        self._inner = inner

    def __iter__(self) -> Iterator[bytes]:
        with _mapped():
            yield from self._inner.iter_stream()

    def close(self) -> None:
        with _mapped():
            self._inner.close()


class GatedTransport(httpx.BaseTransport):
    """Plain httpx behaviour outside a gate; gate-bounded reads inside one."""

    def __init__(
        self,
        *,
        limits: httpx.Limits | None = None,
        verify: ssl.SSLContext | bool = True,
        retries: int = 0,
    ) -> None:
        limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
        if isinstance(verify, ssl.SSLContext):
            ssl_context: ssl.SSLContext | None = verify
        else:
            ssl_context = _shared_ssl_context(bool(verify))
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            retries=retries,
            network_backend=ScopedBackend(current_gate),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        gate = current_gate()
        if gate is not None:
            gate.begin()  # the first-token deadline is anchored when the request is sent
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _mapped():
            response = self._pool.handle_request(core_request)
        if gate is not None:
            gate.note_headers()
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_GatedResponseStream(response),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()
