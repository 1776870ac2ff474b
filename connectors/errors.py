"""The connectors' errors: each carries a message key (rendered through
`locales`) and the parameters of its message, never a secret."""

from __future__ import annotations

from typing import Any


class ConnectorError(Exception):
    """Base of every connector error; `str()` is the English message."""

    message_key = "errors.connector.failed"

    def __init__(self, english: str, /, message_key: str | None = None, **params: Any) -> None:
        if message_key is not None:
            self.message_key = message_key
        self.params = params
        super().__init__(english.format(**params) if params else english)


# --- HTTP ------------------------------------------------------------------------


class AddressRefusedError(ConnectorError):
    """The target resolved to an address the network policy does not open."""

    message_key = "errors.http.addressRefused"


class InvalidURLError(ConnectorError):
    message_key = "errors.http.invalidUrl"


class ResponseTooLargeError(ConnectorError):
    message_key = "errors.http.tooLarge"


class HttpTimeoutError(ConnectorError):
    message_key = "errors.http.timeout"


class TooManyRedirectsError(ConnectorError):
    message_key = "errors.http.tooManyRedirects"


class HttpTransportError(ConnectorError):
    """Connecting, sending or reading failed (refused, reset, broken framing)."""

    message_key = "errors.http.transport"


class RequestCancelledError(ConnectorError):
    message_key = "errors.http.cancelled"
