"""Fallback chains: try targets in order, move on only when another target may help.

Pure policy plus a chain walker; it knows nothing of nodes or the engine.
A target is a name, a callable `attempt()` and what the policy needs to know
about it (its base URL, how to open its gate).

The rules (each tested on both sides of its boundary):

- **When to move on.** Only on a transient `FirstGateError` (timeouts,
  connection errors, rate limit, server unavailable). A bad request, a
  rejected credential or a user cancel ends the chain with that error.
- **Per-attempt cap.** `swap_attempt_timeout_ms_by_target[name]`, else
  `swap_attempt_timeout_ms`, else the clamp; always clamped to
  `swap_attempt_timeout_ms_max` (unset or invalid: 120 s). A per-target
  value that is 0, negative, NaN, infinite or not a number falls through to
  the global value (never to "no cap", never to an instant kill) and is
  warned about once; so are map keys that name no target of the chain.
- **How the cap is enforced.** By the gate: the attempt runs inside its own
  gate, and the chain gives that gate the cap as a named deadline
  (`Gate.cap_attempt`) before the attempt starts. The gate folds it into the
  deadline every connect, write and read waits for, so the attempt ends at
  the cap in any phase (connect, sending, headers, pings, a busy-extended
  first-token wait, mid-reply), with no timer thread, and the gate records
  the typed cause: `AttemptCapError`, which says it was our cap (shrinking
  the stream-total deadline instead would have reported "data kept
  arriving, not a stall", false for an attempt that never produced a
  token). A watchdog probe that is in flight when the cap passes delays the
  end by at most the probe timeout.
- **Total budget.** `swap_total_budget_ms` on a monotonic clock; each
  attempt gets min(cap, remaining). When less than the 250 ms floor
  remains, the chain stops and fails closed (`FallbackBudgetError`)
  instead of starting an attempt it cannot finish.
- **Same host.** A local target on the same origin as a target that just
  failed while its host is busy is skipped (it would queue behind the
  request we gave up on or force a model swap), unless it sets
  `allow_same_host_fallback`. "Busy": the failed target's probe says so; with
  no probe signal, a timed-out attempt means busy.
- **Circuit breaker.** Per target name, shared across chains through
  `CircuitBreakers`: after N consecutive timeouts/unavailable errors (default
  5; capped attempts count) the target is skipped for a cooldown (default
  60 s), with the reason in the skip event. A success, or any answer that
  shows the server is up (bad request, rate limit, ...), closes it.
- **Events.** Every cap, swap, breaker skip, same-host skip, budget stop
  and configuration warning goes to `on_event(FallbackEvent)`.
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from ipaddress import ip_address
from typing import Any, Generic, Literal, Protocol, TypeVar
from urllib.parse import urlsplit

from firstgate.common.durations import DurationError, positive_or_none, require_positive_seconds

from firstgate import locales

from .errors import (
    AttemptCapError,
    ConnectError,
    FallbackBudgetError,
    FallbackConfigError,
    FallbackExhaustedError,
    FirstGateError,
    InvokeConnectionError,
    NoFallbackTargetError,
    ServerUnavailableError,
    StreamTimeoutError,
)
from .gate import Gate, Probe, first_token_gate
from .probes import origin_of

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_ATTEMPT_CAP_MAX_MS = 120_000.0
BUDGET_FLOOR_MS = 250.0
DEFAULT_BREAKER_THRESHOLD = 5
DEFAULT_BREAKER_COOLDOWN_S = 60.0

KEY_GLOBAL = "swap_attempt_timeout_ms"
KEY_BY_TARGET = "swap_attempt_timeout_ms_by_target"
KEY_MAX = "swap_attempt_timeout_ms_max"
KEY_TOTAL = "swap_total_budget_ms"

EventKind = Literal[
    "config_warning", "cap", "cap_fired", "swap", "breaker_skip", "same_host_skip", "budget_stop"
]
CapSource = Literal["target", "global", "max", "budget"]


@dataclass(frozen=True, slots=True)
class FallbackEvent:
    """Something the chain decided, with a machine-readable `reason` and a message."""

    kind: EventKind
    reason: str
    target: str | None
    message_key: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def message(self) -> str:
        return locales.t(self.message_key, None, **self.params)


# --- policy: caps and budget ---------------------------------------------------


def _positive_ms(value: object) -> float | None:
    """The value as positive finite milliseconds, or None if it is anything else
    (a cap never becomes "no cap" nor an instant kill: the caller falls through)."""
    try:
        return positive_or_none(value)
    except DurationError:
        return None


def _fmt_ms(value: float) -> str:
    return f"{value:.0f}"


def _fmt_s(ms: float) -> str:
    seconds = ms / 1000.0
    return f"{seconds:.3g}" if seconds < 10 else f"{seconds:.0f}"


@dataclass(frozen=True, slots=True)
class FallbackPolicy:
    """Resolved caps per target and the total budget; build it with `FallbackPolicy.build`."""

    caps_ms: Mapping[str, tuple[float, CapSource]]
    cap_max_ms: float
    total_budget_ms: float | None
    floor_ms: float = BUDGET_FLOOR_MS
    warnings: tuple[FallbackEvent, ...] = ()

    @classmethod
    def build(
        cls,
        target_names: Sequence[str],
        *,
        swap_attempt_timeout_ms: object = None,
        swap_attempt_timeout_ms_by_target: Mapping[str, object] | None = None,
        swap_attempt_timeout_ms_max: object = None,
        swap_total_budget_ms: object = None,
    ) -> FallbackPolicy:
        warnings: list[FallbackEvent] = []

        def bad(key: str, value: object, instead: str, cap_ms: float) -> None:
            warnings.append(
                FallbackEvent(
                    "config_warning",
                    "bad_cap",
                    None,
                    "watchdog.fallback.badCap",
                    {
                        "setting": key,
                        "value": repr(value)[:40],
                        "instead": instead,
                        "cap": _fmt_ms(cap_ms),
                    },
                )
            )

        cap_max = _positive_ms(swap_attempt_timeout_ms_max)
        if cap_max is None:
            cap_max = DEFAULT_ATTEMPT_CAP_MAX_MS
            if swap_attempt_timeout_ms_max is not None:
                bad(KEY_MAX, swap_attempt_timeout_ms_max, "the default", cap_max)
        global_cap = _positive_ms(swap_attempt_timeout_ms)
        if global_cap is None and swap_attempt_timeout_ms is not None:
            bad(KEY_GLOBAL, swap_attempt_timeout_ms, KEY_MAX, cap_max)
        global_source: CapSource = "global" if global_cap is not None else "max"
        global_ms = min(global_cap, cap_max) if global_cap is not None else cap_max

        by_target = dict(swap_attempt_timeout_ms_by_target or {})
        names = list(dict.fromkeys(target_names))
        for key in by_target:
            if key not in names:
                warnings.append(
                    FallbackEvent(
                        "config_warning",
                        "unknown_target",
                        str(key),
                        "watchdog.fallback.unknownTarget",
                        {"setting": f"{KEY_BY_TARGET}.{key}", "target": str(key)},
                    )
                )
        caps: dict[str, tuple[float, CapSource]] = {}
        for name in names:
            caps[name] = (global_ms, global_source)
            if name not in by_target:
                continue
            own = _positive_ms(by_target[name])
            if own is None:  # falls to the global value, never to "no cap"
                instead = KEY_GLOBAL if global_source == "global" else KEY_MAX
                bad(f"{KEY_BY_TARGET}.{name}", by_target[name], instead, global_ms)
            else:
                caps[name] = (min(own, cap_max), "target")
        return cls(
            caps_ms=caps,
            cap_max_ms=cap_max,
            total_budget_ms=_total_budget(swap_total_budget_ms),
            warnings=tuple(warnings),
        )

    def cap_for(self, name: str) -> tuple[float, CapSource]:
        return self.caps_ms.get(name, (self.cap_max_ms, "max"))


def _total_budget(value: object) -> float | None:
    """None, 0, negative, NaN or infinite: no total budget (the house rule for
    timeouts); anything that is not a number is a configuration error."""
    try:
        return positive_or_none(value)
    except DurationError:
        raise FallbackConfigError(name=KEY_TOTAL, value=repr(value)[:60]) from None


# --- circuit breakers ------------------------------------------------------------


def counts_for_breaker(error: FirstGateError) -> bool:
    """Timeouts (capped attempts included) and "the server is not there" errors."""
    return isinstance(
        error, StreamTimeoutError | ServerUnavailableError | ConnectError | InvokeConnectionError
    )


class BreakerBook(Protocol):
    """What the walker needs from breakers: `CircuitBreakers`, or an adapter that
    maps target names onto keys of a shared instance (the runtime shares one per
    process and keys it by where a route points, not only by its name)."""

    def open_for(self, name: str) -> float | None: ...

    def failures(self, name: str) -> int: ...

    def record(self, name: str, error: FirstGateError | None) -> None: ...


class CircuitBreakers:
    """Consecutive-failure breakers per target name; share one across chains."""

    def __init__(
        self,
        threshold: int = DEFAULT_BREAKER_THRESHOLD,
        cooldown_s: float = DEFAULT_BREAKER_COOLDOWN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise ValueError(f"breaker threshold must be a positive integer, got {threshold!r}")
        self.threshold = threshold
        self.cooldown_s = require_positive_seconds(cooldown_s, "breaker cooldown")
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}
        self._open_until: dict[str, float] = {}

    def failures(self, name: str) -> int:
        with self._lock:
            return self._failures.get(name, 0)

    def open_for(self, name: str) -> float | None:
        """Seconds until the breaker of `name` lets an attempt through, or None if closed."""
        with self._lock:
            until = self._open_until.get(name)
            if until is None:
                return None
            left = until - self._clock()
            if left > 0:
                return left
            # Cooldown over: half-open. The next failure reopens it at once
            # (the count is still at the threshold); a success closes it.
            del self._open_until[name]
            return None

    def record(self, name: str, error: FirstGateError | None) -> None:
        """Record an attempt's outcome (None: success)."""
        with self._lock:
            if error is None or not counts_for_breaker(error):
                self._failures.pop(name, None)
                self._open_until.pop(name, None)
                return
            count = self._failures.get(name, 0) + 1
            self._failures[name] = count
            if count >= self.threshold:
                self._open_until[name] = self._clock() + self.cooldown_s


# --- targets and the walker ------------------------------------------------------

_LOCAL_SUFFIXES = (".local", ".internal", ".lan", ".localhost", ".home.arpa")


def is_local_host(base_url: str) -> bool:
    """Loopback, private and link-local addresses, `localhost`, single-label names
    (container service names) and the usual private DNS suffixes."""
    host = (urlsplit(base_url).hostname or "").lower()
    if not host:
        return False
    try:
        address = ip_address(host)
    except ValueError:
        return host == "localhost" or "." not in host or host.endswith(_LOCAL_SUFFIXES)
    return address.is_loopback or address.is_private or address.is_link_local


def _default_gate() -> AbstractContextManager[Gate]:
    return first_token_gate()


@dataclass(frozen=True)
class Target(Generic[T]):
    """One link of the chain. `attempt()` runs inside the gate `open_gate()` opens
    (the walker adds its attempt cap to it), so its model requests obey both."""

    name: str
    attempt: Callable[[], T]
    base_url: str | None = None
    open_gate: Callable[[], AbstractContextManager[Gate]] = _default_gate
    probe: Probe | None = None
    allow_same_host_fallback: bool = False
    local: bool | None = None  # None: decided from base_url

    @property
    def origin(self) -> str | None:
        if not self.base_url:
            return None
        try:
            return origin_of(self.base_url)
        except ValueError:
            return None

    @property
    def is_local(self) -> bool:
        if self.local is not None:
            return self.local
        return bool(self.base_url) and is_local_host(self.base_url or "")


@dataclass(frozen=True, slots=True)
class FallbackResult(Generic[T]):
    value: T
    target: str
    attempts: tuple[tuple[str, FirstGateError], ...]  # the failures before it


@dataclass
class _Failed:
    target: Target[Any]
    error: FirstGateError
    busy: bool | None = None  # decided lazily: only a same-origin target needs it


class FallbackChain(Generic[T]):
    """Walks `targets` under `policy`. Reusable; thread-safe if its callbacks are."""

    def __init__(
        self,
        targets: Sequence[Target[T]],
        policy: FallbackPolicy | None = None,
        *,
        breakers: BreakerBook | None = None,
        on_event: Callable[[FallbackEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not targets:
            raise ValueError("a fallback chain needs at least one target")
        names = [t.name for t in targets]
        if len(set(names)) != len(names):
            raise ValueError(f"fallback target names must be unique, got {names}")
        self.targets = list(targets)
        self.policy = policy or FallbackPolicy.build(names)
        self.breakers: BreakerBook = breakers or CircuitBreakers(clock=clock)
        self._on_event = on_event
        self._clock = clock
        self._warned = False
        self._warn_lock = threading.Lock()

    def _emit(self, event: FallbackEvent) -> None:
        if event.kind in ("config_warning", "budget_stop", "breaker_skip"):
            log.warning("%s", event.message)
        if self._on_event is not None:
            self._on_event(event)

    def _warn_once(self) -> None:
        with self._warn_lock:
            if self._warned:
                return
            self._warned = True
        for warning in self.policy.warnings:
            self._emit(warning)

    def run(self) -> FallbackResult[T]:
        self._warn_once()
        start = self._clock()
        failed: list[_Failed] = []
        skips: list[str] = []
        total = self.policy.total_budget_ms
        for target in self.targets:
            # Rounded to the microsecond: float noise must not decide the floor.
            remaining = (
                None if total is None else round(total - (self._clock() - start) * 1000.0, 3)
            )
            if remaining is not None and remaining < self.policy.floor_ms:
                self._budget_stop(target, remaining, total or 0.0, failed)
            skip = self._skip_reason(target, failed)
            if skip is not None:
                self._emit(skip)
                skips.append(skip.message)
                continue
            cap_ms, source = self.policy.cap_for(target.name)
            if remaining is not None and remaining < cap_ms:
                cap_ms, source = remaining, "budget"
            if failed:
                self._emit(self._swap_event(failed[-1], target))
            self._emit(
                FallbackEvent(
                    "cap",
                    source,
                    target.name,
                    "watchdog.fallback.cap",
                    {"target": target.name, "cap": _fmt_s(cap_ms), "source": source},
                )
            )
            try:
                value = self._attempt(target, cap_ms)
            except FirstGateError as error:
                self.breakers.record(target.name, error)
                if not error.transient:
                    raise
                failed.append(_Failed(target, error))
                continue
            self.breakers.record(target.name, None)
            return FallbackResult(
                value, target.name, tuple((f.target.name, f.error) for f in failed)
            )
        if not failed:
            raise NoFallbackTargetError(detail=" ".join(skips))
        last = failed[-1]
        raise FallbackExhaustedError(
            attempts=[(f.target.name, f.error) for f in failed],
            targets=", ".join(f.target.name for f in failed),
            target=last.target.name,
            detail=str(last.error),
        ) from last.error

    # --- one attempt ---------------------------------------------------------

    def _attempt(self, target: Target[T], cap_ms: float) -> T:
        with target.open_gate() as gate:
            gate.cap_attempt(cap_ms / 1000.0, target.name)
            try:
                return target.attempt()
            except AttemptCapError as capped:
                self._emit(
                    FallbackEvent(
                        "cap_fired", "attempt_cap", target.name, capped.message_key, capped.params
                    )
                )
                raise

    # --- skipping and stopping -----------------------------------------------

    def _skip_reason(self, target: Target[T], failed: list[_Failed]) -> FallbackEvent | None:
        open_for = self.breakers.open_for(target.name)
        if open_for is not None:
            return FallbackEvent(
                "breaker_skip",
                "breaker_open",
                target.name,
                "watchdog.fallback.breakerSkip",
                {
                    "target": target.name,
                    "failures": self.breakers.failures(target.name),
                    "retry_in": f"{math.ceil(open_for)}",
                },
            )
        busy = self._busy_same_host(target, failed)
        if busy is not None:
            return FallbackEvent(
                "same_host_skip",
                "same_host_busy",
                target.name,
                "watchdog.fallback.sameHostSkip",
                {"target": target.name, "host": target.origin or "?", "busy": busy.target.name},
            )
        return None

    def _busy_same_host(self, target: Target[T], failed: list[_Failed]) -> _Failed | None:
        if target.allow_same_host_fallback or not target.is_local or target.origin is None:
            return None
        for entry in failed:
            if entry.target.origin == target.origin and entry.target.is_local:
                if entry.busy is None:
                    entry.busy = _host_busy(entry)
                if entry.busy:
                    return entry
        return None

    def _budget_stop(
        self, target: Target[T], remaining: float, total: float, failed: list[_Failed]
    ) -> None:
        params = {
            "target": target.name,
            "remaining": _fmt_ms(max(remaining, 0.0)),
            "budget": _fmt_ms(total),
            "floor": _fmt_ms(self.policy.floor_ms),
        }
        self._emit(
            FallbackEvent(
                "budget_stop", "budget_floor", target.name, "watchdog.fallback.budgetStop", params
            )
        )
        last = failed[-1].error if failed else None
        raise FallbackBudgetError(
            attempts=[(f.target.name, f.error) for f in failed],
            targets=", ".join(f.target.name for f in failed) or "-",
            detail=str(last) if last is not None else "",
            **params,
        ) from last

    @staticmethod
    def _swap_event(previous: _Failed, target: Target[T]) -> FallbackEvent:
        return FallbackEvent(
            "swap",
            previous.error.error_type,
            target.name,
            "watchdog.fallback.swap",
            {
                "failed": previous.target.name,
                "error_type": previous.error.error_type,
                "target": target.name,
            },
        )


def _host_busy(entry: _Failed) -> bool:
    """Is the host of a failed target still working? Its probe decides; with no
    signal, an attempt that timed out means the host was (and likely is) busy."""
    probe = entry.target.probe
    if probe is not None:
        try:
            answer = contextvars.Context().run(probe)
        except Exception:
            answer = None
        if answer is not None:
            return answer == "busy"
    return isinstance(entry.error, StreamTimeoutError)
