"""The one exception hierarchy of the model-server client, and the one place
that maps low-level failures onto it.

```
FirstGateError (LocalizedError)     every error this package raises
├── GateConfigError (ValueError)    a budget that is not a number
│   ├── BudgetConfigError           a first-token budget setting that is not seconds
│   ├── CeilingConfigError          a first-token ceiling that is not positive seconds
│   └── FallbackConfigError         a fallback setting that is not milliseconds
├── ClientConfigError (ValueError)  an LLMClient that cannot be built (kind, URL, key)
├── StreamError                     carries what had already arrived (progress)
│   ├── StreamTimeoutError          a deadline of the gate fired (`deadline` says which)
│   │   ├── FirstTokenTimeoutError  no content token within the first-token budget (or ceiling)
│   │   ├── IdleTimeoutError        tokens arrived, then the server went quiet
│   │   ├── StreamTotalTimeoutError data kept arriving past the absolute cap
│   │   └── AttemptCapError         a fallback chain's per-attempt cap
│   ├── StreamCancelledError        gate.cancel(): user or workflow abort
│   ├── ConnectionLostError         the connection broke mid-response
│   │   └── TruncatedBodyError      the body ended in the middle of a frame
│   └── ProtocolError               the server spoke, but not the protocol
│       ├── EmptyResponseError      clean close, no token, nobody aborted
│       ├── FrameTooLargeError      an SSE line over the configured limit
│       ├── MalformedFrameError     a frame that is not the JSON we expect
│       ├── UnexpectedContentTypeError  the body is not an event stream
│       └── ReplyTooLargeError      the reply grew past the route's size cap
├── ConnectError                    could not reach the server at all
├── InvokeError                     the server or provider refused the call
│   ├── RateLimitError              429, InvokeRateLimitError
│   ├── AuthorizationError          401/403, InvokeAuthorizationError
│   ├── BadRequestError             400/404/422, InvokeBadRequestError
│   ├── ContentBlockedError         blocked for safety or policy (not transient)
│   ├── RedirectError               3xx: redirects are never followed
│   ├── InvokeConnectionError       the provider could not reach its model
│   ├── ServerUnavailableError      502/503/504, InvokeServerUnavailableError
│   └── InvokeServerError           any other server-side failure
└── FallbackExhaustedError          every fallback target that could be tried failed
    ├── FallbackBudgetError         the chain's total budget ran out
    └── NoFallbackTargetError       every target was skipped
```

Every error has a `message_key` and `params` so a front end can render it in
any locale (`render(locale)`); `str(error)` is the stable English text for
logs. `transient` says whether another attempt (a retry or a fallback target)
may help. Server text reaches an error only as `common.redaction.ServerText`, which
the client's `Redactor` turns into a credential-free quote.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpcore
import httpx
from firstgate.common.redaction import ServerText
from firstgate.locales.localized_error import LocalizedError


class Trip(StrEnum):
    """Why a gate ended a stream. The values are part of the public surface
    (`StreamTimeoutError.deadline`, `Gate.fired`, events, logs)."""

    FIRST_TOKEN = "first_token"
    IDLE = "idle"
    STREAM_TOTAL = "stream_total"
    CEILING = "ceiling"
    ATTEMPT_CAP = "attempt_cap"
    CANCELLED = "cancelled"


FIRST_TOKEN = Trip.FIRST_TOKEN
IDLE = Trip.IDLE
STREAM_TOTAL = Trip.STREAM_TOTAL
CEILING = Trip.CEILING
ATTEMPT_CAP = Trip.ATTEMPT_CAP


def _seconds(value: float) -> str:
    return f"{value:.3g}" if value < 10 else f"{value:.0f}"


@dataclass(slots=True)
class StreamProgress:
    """What a stream had produced when it ended: kept on every stream error."""

    tokens: int = 0
    parts: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    headers_received: bool = False
    bytes_received: int = 0

    @property
    def partial_text(self) -> str:
        return "".join(self.parts)


class FirstGateError(LocalizedError):
    """Base of every error raised by `plugin_daemon_client`."""

    transient: bool = False

    @property
    def partial_text(self) -> str:
        """The reply text that had arrived before the error ("" when none could)."""
        return ""


class GateConfigError(FirstGateError, ValueError):
    """A gate budget that is neither a number nor empty."""

    message_key = "errors.config.invalidTimeout"


class ClientConfigError(FirstGateError, ValueError):
    """An `LLMClient` that cannot be built: unknown kind, bad base_url, unusable key."""


class ConnectError(FirstGateError):
    message_key = "errors.connect"
    transient = True


class StreamError(FirstGateError):
    """An error after the request was sent; `progress` is what had arrived."""

    deadline: Trip | None = None

    def __init__(
        self,
        message_key: str | None = None,
        *,
        progress: StreamProgress | None = None,
        **params: Any,
    ) -> None:
        self.progress = progress or StreamProgress()
        params.setdefault("tokens", self.progress.tokens)
        params.setdefault("elapsed", _seconds(self.progress.elapsed_s))
        super().__init__(message_key, **params)

    @property
    def partial_text(self) -> str:
        return self.progress.partial_text

    @property
    def tokens(self) -> int:
        return self.progress.tokens

    @property
    def elapsed_s(self) -> float:
        return self.progress.elapsed_s


class StreamTimeoutError(StreamError):
    """One of the gate's deadlines fired; `deadline` names which."""

    transient = True


class FirstTokenTimeoutError(StreamTimeoutError):
    """No content token within the first-token budget (raised only with zero tokens)."""

    deadline = FIRST_TOKEN


class IdleTimeoutError(StreamTimeoutError):
    deadline = IDLE
    message_key = "errors.idleTimeout"


class StreamTotalTimeoutError(StreamTimeoutError):
    deadline = STREAM_TOTAL
    message_key = "errors.streamTotalTimeout"


class StreamCancelledError(StreamError):
    message_key = "errors.cancelled"


class ConnectionLostError(StreamError):
    message_key = "errors.connectionLost"
    transient = True


class TruncatedBodyError(ConnectionLostError):
    """The body ended in the middle of a frame (a short Content-Length, a cut connection)."""

    message_key = "errors.truncatedBody"


class ProtocolError(StreamError):
    message_key = "errors.malformedFrame"


class EmptyResponseError(ProtocolError):
    message_key = "errors.emptyResponse"
    transient = True


class FrameTooLargeError(ProtocolError):
    message_key = "errors.frameTooLarge"


class MalformedFrameError(ProtocolError):
    message_key = "errors.malformedFrame"


class UnexpectedContentTypeError(ProtocolError):
    message_key = "errors.unexpectedContentType"


class ReplyTooLargeError(ProtocolError):
    """The reply grew past the route's `max_reply_bytes`; another attempt would too."""

    message_key = "errors.replyTooLarge"


class InvokeError(FirstGateError):
    """The server or the provider behind it refused or failed the call."""

    message_key = "errors.invoke.server"

    def __init__(
        self,
        message_key: str | None = None,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        **params: Any,
    ) -> None:
        self.status = status
        self.retry_after_s = retry_after_s
        # Set when the refusal came mid-stream (an error frame): what had arrived.
        self.progress: StreamProgress | None = None
        super().__init__(message_key, **params)

    @property
    def partial_text(self) -> str:
        return self.progress.partial_text if self.progress else ""

    @property
    def tokens(self) -> int:
        return self.progress.tokens if self.progress else 0


class RateLimitError(InvokeError):
    message_key = "errors.invoke.rateLimit"
    transient = True


class AuthorizationError(InvokeError):
    message_key = "errors.invoke.authorization"


class BadRequestError(InvokeError):
    message_key = "errors.invoke.badRequest"


class ContentBlockedError(InvokeError):
    """The provider refused the prompt or the answer for safety or policy
    (Gemini's `blockReason` or `finishReason: SAFETY`, Anthropic's `refusal`, a
    content filter): asking again gets the same answer."""

    message_key = "errors.invoke.blocked"


class RedirectError(InvokeError):
    """A 3xx answer. Redirects are never followed (one could take the key to another
    host), and asking again gets the same answer: not transient."""

    message_key = "errors.invoke.redirect"


class InvokeConnectionError(InvokeError):
    message_key = "errors.invoke.connection"
    transient = True


class ServerUnavailableError(InvokeError):
    message_key = "errors.invoke.serverUnavailable"
    transient = True


class InvokeServerError(InvokeError):
    message_key = "errors.invoke.server"
    transient = True


# --- the mapping place -------------------------------------------------------

# Dify's invoke error names (plugin daemon `PluginInvokeError` payloads) -> ours.
DAEMON_INVOKE_ERRORS: dict[str, type[InvokeError]] = {
    "InvokeRateLimitError": RateLimitError,
    "InvokeAuthorizationError": AuthorizationError,
    "CredentialsValidateFailedError": AuthorizationError,
    "InvokeBadRequestError": BadRequestError,
    "InvokeConnectionError": InvokeConnectionError,
    "InvokeServerUnavailableError": ServerUnavailableError,
    "PluginDaemonUnauthorizedError": AuthorizationError,
    "PluginPermissionDeniedError": AuthorizationError,
    "PluginDaemonBadRequestError": BadRequestError,
    "PluginDaemonNotFoundError": BadRequestError,
    "PluginNotFoundError": BadRequestError,
    "PluginUniqueIdentifierError": BadRequestError,
}


def invoke_error_for_status(status: int) -> type[InvokeError]:
    if status == 429:
        return RateLimitError
    if status in (401, 403):
        return AuthorizationError
    if status in (400, 404, 405, 409, 413, 422):
        return BadRequestError
    if status in (502, 503, 504):
        return ServerUnavailableError
    return InvokeServerError


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header given in seconds; dates are ignored."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def timeout_error(
    deadline: Trip, progress: StreamProgress, *, budget_s: float, **params: Any
) -> StreamTimeoutError:
    """Build the timeout error for the deadline that fired, with an honest message.
    `params`: `knob` for the ceiling, `target` for an attempt cap."""
    budget = _seconds(budget_s)
    if deadline is Trip.FIRST_TOKEN:
        key = (
            "errors.firstTokenTimeout.accepted"
            if progress.headers_received
            else "errors.firstTokenTimeout.notAccepted"
        )
        return FirstTokenTimeoutError(key, progress=progress, budget=budget)
    if deadline is Trip.CEILING:
        err = FirstTokenTimeoutError(
            "errors.firstTokenTimeout.ceiling", progress=progress, ceiling=budget, **params
        )
        err.deadline = Trip.CEILING
        return err
    if deadline is Trip.IDLE:
        return IdleTimeoutError(progress=progress, idle=budget)
    if deadline is Trip.STREAM_TOTAL:
        return StreamTotalTimeoutError(progress=progress, cap=budget)
    if deadline is Trip.ATTEMPT_CAP:
        return AttemptCapError(progress=progress, cap=budget, **params)
    raise AssertionError(f"not a deadline: {deadline!r}")


def map_transport_exception(
    exc: BaseException, progress: StreamProgress, *, url: str
) -> FirstGateError | None:
    """Map an httpx/httpcore failure (no gate involved) onto our hierarchy.

    Returns None for anything that is not a transport failure, so the caller
    re-raises it unchanged.
    """
    # httpx's messages may quote what the server sent: server text.
    detail = ServerText(str(exc) or type(exc).__name__)
    if isinstance(
        exc,
        httpx.ConnectError | httpx.ConnectTimeout | httpcore.ConnectError | httpcore.ConnectTimeout,
    ):
        return ConnectError(url=url, detail=detail)
    if isinstance(exc, httpx.TimeoutException | httpcore.TimeoutException):
        # The caller's own httpx read timeout (not a gate deadline).
        if progress.tokens:
            return IdleTimeoutError(progress=progress, idle="?")
        return FirstTokenTimeoutError(
            "errors.firstTokenTimeout.accepted"
            if progress.headers_received
            else "errors.firstTokenTimeout.notAccepted",
            progress=progress,
            budget="?",
        )
    if isinstance(
        exc,
        httpx.NetworkError
        | httpx.RemoteProtocolError
        | httpcore.NetworkError
        | httpcore.RemoteProtocolError,
    ):
        return ConnectionLostError(progress=progress, detail=detail)
    return None


# --- first-token budget settings and fallback chains (issue 5) ---------------


class BudgetConfigError(GateConfigError):
    """A first-token budget setting (environment variable or models-file key) that is
    not a number of seconds >= 0, "auto" or empty. Never replaced by a silent default."""

    message_key = "errors.config.invalidBudget"


class CeilingConfigError(GateConfigError):
    """A first-token ceiling setting that is not a positive number of seconds."""

    message_key = "errors.config.invalidCeiling"


class FallbackConfigError(GateConfigError):
    """A fallback setting in milliseconds that is not a number."""

    message_key = "errors.config.invalidMilliseconds"


class AttemptCapError(StreamTimeoutError):
    """A fallback chain stopped this attempt at its per-attempt cap (through the gate),
    so that the next target can be tried."""

    deadline = Trip.ATTEMPT_CAP
    message_key = "errors.fallback.attemptCap"


class FallbackExhaustedError(FirstGateError):
    """Every fallback target that could be tried failed with a transient error.

    `attempts` lists (target, error) in order; `last_error` is the last one and is
    also the `__cause__`. `transient` follows the last error.
    """

    message_key = "errors.fallback.exhausted"

    def __init__(
        self,
        message_key: str | None = None,
        *,
        attempts: list[tuple[str, FirstGateError]] | None = None,
        **params: Any,
    ) -> None:
        self.attempts = list(attempts or [])
        self.last_error: FirstGateError | None = self.attempts[-1][1] if self.attempts else None
        self.transient = self.last_error.transient if self.last_error is not None else True
        super().__init__(message_key, **params)


class FallbackBudgetError(FallbackExhaustedError):
    """The chain's total budget left less than the floor needed to start an attempt."""

    message_key = "errors.fallback.budget"


class NoFallbackTargetError(FallbackExhaustedError):
    """Every target was skipped (circuit breaker open, same busy host): nothing was tried."""

    message_key = "errors.fallback.noTarget"
