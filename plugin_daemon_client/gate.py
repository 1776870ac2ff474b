"""The first-token gate: deadlines on a monotonic clock, carried in a ContextVar.

The LLM node opens a gate; the transport's sockets look it up in the
ContextVar and bound every connect, send and read by what the gate has left:
the gate is a `SocketScope` (`common/socket_scope.py`), the one primitive the
guarded HTTP client's deadline uses too. No layer in between takes a new
parameter.

Deadlines are absolute monotonic times that the gate can move (trio's cancel
scopes, not loose timers or threads):

- first token: request start + budget; ended only by a *content* token
  (the client calls `note_tokens`); the watchdog may move it when the
  backend reports it is still busy, never past the ceiling;
- idle: last byte + budget, only after the first token;
- stream total: request start + budget, never refreshed;
- attempt cap: set by a fallback chain before the attempt starts
  (`cap_attempt`), anchored then, and kept across `begin`.

`next_deadline` folds them into the one the socket layer waits for. Whoever
ends a stream records a typed cause first (`Trip`, under one lock), so a
token is never both delivered and reported as timed out, and a socket that a
cancel shut down is reported as that cancel, never as an empty success.
"""

from __future__ import annotations

import contextvars
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from firstgate.common.socket_scope import shutdown

from firstgate import locales

from .budgets import DEFAULT_CEILING_S, GateBudgets
from .errors import (
    FirstGateError,
    StreamCancelledError,
    StreamProgress,
    Trip,
    timeout_error,
)

ProbeAnswer = Literal["busy", "idle"] | None
CEILING_KNOB = "first_token_gate(ceiling=...) / FIRSTGATE_FIRST_TOKEN_CEILING_S"


class Probe(Protocol):
    """Asks the backend whether it is still working on our request."""

    def __call__(self) -> ProbeAnswer: ...


@dataclass(frozen=True, slots=True)
class WaitInfo:
    """The watchdog extended the first-token wait because the backend is busy."""

    elapsed_s: float
    extended_by_s: float
    extensions: int
    prompt_tokens: int | None
    message_key: str = "watchdog.waiting"

    @property
    def params(self) -> dict[str, Any]:
        tokens = f"{self.prompt_tokens:,}" if self.prompt_tokens is not None else "?"
        return {"prompt_tokens": tokens, "elapsed": f"{self.elapsed_s:.0f}"}

    @property
    def message(self) -> str:
        return locales.t(self.message_key, None, **self.params)


class GateTripped(Exception):
    """Internal signal from the socket layer: the gate ended the stream.

    The client turns it into `error`, the public exception recorded at trip time.
    """

    def __init__(self, error: FirstGateError) -> None:
        super().__init__(str(error))
        self.error = error


_current_gate: contextvars.ContextVar[Gate | None] = contextvars.ContextVar(
    "firstgate_current_gate", default=None
)


def current_gate() -> Gate | None:
    return _current_gate.get()


class Gate:
    """Deadlines and progress of the request running in this context: the
    `SocketScope` of its sockets (`next_deadline`, `expire`, `attach`,
    `raise_if_tripped`, `note_bytes`)."""

    def __init__(
        self,
        budgets: GateBudgets,
        *,
        on_wait: Callable[[WaitInfo], None] | None = None,
        probe: Probe | None = None,
        prompt_tokens: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_probe: Callable[[ProbeAnswer], None] | None = None,
    ) -> None:
        """`on_probe` hears every probe answer (busy, idle, None: no answer)."""
        self.budgets = budgets
        self.on_wait = on_wait
        self.on_probe = on_probe
        self.probe = probe
        self.prompt_tokens = prompt_tokens
        self._clock = clock
        self._lock = threading.Lock()
        self.progress = StreamProgress()
        self._started: float | None = None
        self._first_token_deadline: float | None = None
        self._cap_deadline: float | None = None
        self._ceiling_deadline: float | None = None
        # A fallback chain's per-attempt cap: (instant, seconds, target).
        self._attempt_cap: tuple[float, float, str] | None = None
        self._last_byte: float | None = None
        self._tripped: FirstGateError | None = None
        self._fired: Trip | None = None
        self._sock: socket.socket | None = None
        self.extensions = 0

    # --- lifecycle ---------------------------------------------------------

    def begin(self) -> None:
        """Anchor the deadlines: the request is being sent now."""
        now = self._clock()
        with self._lock:
            self._started = now
            self.progress = StreamProgress()
            self._last_byte = None
            self.extensions = 0
            ft, cap, ceiling = (
                self.budgets.first_token,
                self.budgets.stream_total,
                self.budgets.ceiling,
            )
            self._first_token_deadline = now + ft if ft is not None else None
            self._cap_deadline = now + cap if cap is not None else None
            self._ceiling_deadline = now + ceiling if ceiling is not None else None

    @property
    def active(self) -> bool:
        return self._started is not None

    def elapsed(self) -> float:
        return 0.0 if self._started is None else self._clock() - self._started

    @property
    def fired(self) -> Trip | None:
        """Why the gate ended the stream (which deadline, or a cancel), or None."""
        return self._fired

    @property
    def attempt_cap(self) -> float | None:
        """The fallback chain's cap on this attempt, in seconds (None: no cap)."""
        return None if self._attempt_cap is None else self._attempt_cap[1]

    def cap_attempt(self, seconds: float, target: str) -> None:
        """A fallback chain's cap on this attempt: `seconds` from now, whatever
        phase the request is in; firing ends it with `AttemptCapError`."""
        self._attempt_cap = (self._clock() + seconds, seconds, target)

    def await_error_body(self, seconds: float) -> None:
        """The server answered with an error status: no token will come, so the
        first-token deadline no longer applies; its body gets at most `seconds`
        (the stream-total deadline, brought forward). The attempt cap stays."""
        at = self._clock() + seconds
        with self._lock:
            self._first_token_deadline = None
            if self._cap_deadline is None or at < self._cap_deadline:
                self._cap_deadline = at

    @property
    def tripped(self) -> FirstGateError | None:
        return self._tripped

    # --- what the socket layer asks ------------------------------------------

    def next_deadline(self) -> tuple[float, Trip] | None:
        """The earliest active deadline as (monotonic time, which)."""
        best: tuple[float, Trip] | None = None
        if self.progress.tokens == 0:
            if self._first_token_deadline is not None:
                best = (self._first_token_deadline, Trip.FIRST_TOKEN)
        elif self.budgets.idle is not None and self._last_byte is not None:
            best = (self._last_byte + self.budgets.idle, Trip.IDLE)
        if self._cap_deadline is not None and (best is None or self._cap_deadline < best[0]):
            best = (self._cap_deadline, Trip.STREAM_TOTAL)
        attempt = self._attempt_cap
        if attempt is not None and (best is None or attempt[0] < best[0]):
            best = (attempt[0], Trip.ATTEMPT_CAP)
        return best

    def attach(self, sock: socket.socket | None) -> None:
        """Remember the socket a cancel must shut down; raise if already ended.

        No lock on this per-read path: we store the socket, then look for a
        trip; `cancel` records the trip, then looks for the socket. Whichever
        runs second sees the other's write, so a cancel is never missed.
        """
        if self._sock is not sock:
            self._sock = sock
        tripped = self._tripped
        if tripped is not None:
            raise GateTripped(tripped)

    def detach(self) -> None:
        with self._lock:
            self._sock = None

    def raise_if_tripped(self) -> None:
        tripped = self._tripped
        if tripped is not None:
            raise GateTripped(tripped)

    def note_headers(self) -> None:
        self.progress.headers_received = True

    def note_bytes(self, count: int) -> None:
        if count:
            self.progress.bytes_received += count
            self._last_byte = self._clock()

    def note_first_content(self) -> None:
        """A non-streamed reply's body began: the first-token deadline is met
        (the stream cap and the attempt cap still bound the rest)."""
        with self._lock:
            if self._tripped is not None:
                raise GateTripped(self._tripped)
            self._first_token_deadline = None

    def note_tokens(self, count: int, text: str) -> None:
        """`count` content tokens arrived (their joined text): the first ends the
        first-token phase.

        Mutually exclusive with firing: if the gate already ended the stream,
        the tokens are not delivered and the recorded reason is raised instead.
        """
        with self._lock:
            if self._tripped is not None:
                raise GateTripped(self._tripped)
            progress = self.progress
            progress.tokens += count
            if text:
                progress.parts.append(text)

    # --- ending a stream ---------------------------------------------------

    def expire(self, which: Trip | str) -> None:
        """The read bounded by deadline `which` timed out.

        Returns normally when the wait was extended (keep reading on the same
        connection); raises GateTripped when the gate ends the stream.
        """
        which = Trip(which)
        if which is Trip.ATTEMPT_CAP:
            assert self._attempt_cap is not None
            _, seconds, target = self._attempt_cap
            self._trip(which, seconds, target=target)
        if which is Trip.FIRST_TOKEN and self.probe is not None:
            if self._extend_if_busy():
                return
        budget = {
            Trip.FIRST_TOKEN: self.budgets.first_token,
            Trip.IDLE: self.budgets.idle,
            Trip.STREAM_TOTAL: self.budgets.stream_total,
        }[which]
        if which is Trip.FIRST_TOKEN and self.extensions and self._ceiling_reached():
            self._trip(Trip.CEILING, self.budgets.ceiling or 0.0, knob=CEILING_KNOB)
        self._trip(which, budget or 0.0)

    def cancel(self, reason: str = "cancelled") -> None:
        """End the stream from any thread or greenlet: record why, then shut the socket down."""
        with self._lock:
            if self._tripped is None:
                self.progress.elapsed_s = self.elapsed()
                self._tripped = StreamCancelledError(progress=self.progress, reason=reason)
                self._fired = Trip.CANCELLED
            sock = self._sock
        if sock is not None:
            shutdown(sock)

    def _trip(self, which: Trip, budget_s: float, **params: Any) -> None:
        with self._lock:
            if self._tripped is None:
                if which is Trip.FIRST_TOKEN and self.progress.tokens:
                    return  # a token won the race: the first-token deadline is disarmed
                self.progress.elapsed_s = self.elapsed()
                self._tripped = timeout_error(which, self.progress, budget_s=budget_s, **params)
                self._fired = which
            tripped = self._tripped
        raise GateTripped(tripped)

    # --- the watchdog ------------------------------------------------------

    def _ceiling_reached(self) -> bool:
        return self._ceiling_deadline is not None and self._clock() >= self._ceiling_deadline

    def _extend_if_busy(self) -> bool:
        """Ask the backend once per expired window; extend the wait if it is busy."""
        window = self.budgets.first_token
        if window is None or self._ceiling_reached():
            return False
        try:
            # A fresh context: the probe's own HTTP request must not see this gate.
            answer = contextvars.Context().run(self.probe)  # type: ignore[arg-type]
        except Exception:
            answer = None
        if self.on_probe is not None:
            self.on_probe(answer)
        if answer != "busy":
            return False
        now = self._clock()
        new_deadline = now + window
        if self._ceiling_deadline is not None:
            new_deadline = min(new_deadline, self._ceiling_deadline)
        with self._lock:
            if self._tripped is not None:
                raise GateTripped(self._tripped)
            self._first_token_deadline = new_deadline
            self.extensions += 1
        if self.on_wait is not None:
            self.on_wait(
                WaitInfo(
                    elapsed_s=self.elapsed(),
                    extended_by_s=new_deadline - now,
                    extensions=self.extensions,
                    prompt_tokens=self.prompt_tokens,
                )
            )
        return True


@contextmanager
def first_token_gate(
    first_token_timeout: object = None,
    idle_timeout: object = None,
    stream_total_timeout: object = None,
    on_wait: Callable[[WaitInfo], None] | None = None,
    probe: Probe | None = None,
    *,
    ceiling: object = DEFAULT_CEILING_S,
    prompt_tokens: int | None = None,
    on_probe: Callable[[ProbeAnswer], None] | None = None,
) -> Iterator[Gate]:
    """Open a gate for the model requests made in this context.

    Budgets are seconds; None, 0, negative, NaN or infinite disable that
    deadline. The gate is always reset on exit.
    """
    budgets = GateBudgets.build(first_token_timeout, idle_timeout, stream_total_timeout, ceiling)
    gate = Gate(
        budgets, on_wait=on_wait, probe=probe, prompt_tokens=prompt_tokens, on_probe=on_probe
    )
    with gate_in_context(gate):
        yield gate


@contextmanager
def gate_in_context(gate: Gate) -> Iterator[Gate]:
    """Make `gate` the current gate of this context; always reset on exit."""
    token = _current_gate.set(gate)
    try:
        yield gate
    finally:
        gate.detach()
        _current_gate.reset(token)
