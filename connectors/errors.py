"""The connectors' errors: each is a `LocalizedError` (a message key and its
parameters, rendered from `locales`), and none ever carries a secret."""

from __future__ import annotations

from firstgate.locales.localized_error import LocalizedError


class ConnectorError(LocalizedError):
    """Base of every connector error."""

    message_key = "errors.connector.failed"


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
