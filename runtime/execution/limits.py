"""Run limits: steps and wall-clock time. Time is enforced by a timer, so a
node blocked on a socket cannot outlast it.

What a limit stops: when it fires, the run's cancel token is cancelled, which
shuts every in-flight model stream down through its gate (and every other
cancellable wait: HTTP requests, sandboxed code, waits between retries); the
run then ends as failed within `DRAIN_GRACE_S` (engine). What it cannot stop:
Python code running in a worker thread of this process (a thread cannot be
killed), so a CPU-bound node that runs in-process goes on burning CPU after
the run has ended, until it returns. Code nodes and heavy templates run in the
sandbox's processes, which are killed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from firstgate.common.dsl import shown
from firstgate.common.durations import DurationError, parse_duration
from firstgate.locales.localized_error import LocalizedError

DEFAULT_MAX_STEPS = 500  # node executions (Dify's WORKFLOW_MAX_EXECUTION_STEPS)
DEFAULT_MAX_RUN_SECONDS = 1200.0  # Dify's WORKFLOW_MAX_EXECUTION_TIME


class LimitSettingError(LocalizedError, ValueError):
    """A run limit that is not one (the CLI exits 2 with it)."""


@dataclass(frozen=True, slots=True)
class RunLimits:
    """`max_steps`: node executions, at least 1. `max_run_seconds`: wall-clock
    seconds; None or 0 means no time limit."""

    max_steps: int = DEFAULT_MAX_STEPS
    max_run_seconds: float | None = DEFAULT_MAX_RUN_SECONDS

    def __post_init__(self) -> None:
        steps = self.max_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise LimitSettingError("cli.limit.badSteps", got=shown(steps))
        try:
            seconds = parse_duration(self.max_run_seconds, strings=False)
        except DurationError:
            raise LimitSettingError("cli.limit.badTime", got=shown(self.max_run_seconds)) from None
        object.__setattr__(self, "max_run_seconds", seconds or None)

    @classmethod
    def from_text(cls, steps: str | None, seconds: str | None) -> RunLimits:
        """Limits as the CLI's flags give them (None: the default)."""
        max_steps = DEFAULT_MAX_STEPS
        if steps is not None:
            if not steps.strip().isdigit():
                raise LimitSettingError("cli.limit.badSteps", got=shown(steps))
            max_steps = int(steps.strip())
        max_run_seconds: float | None = DEFAULT_MAX_RUN_SECONDS
        if seconds is not None:
            try:
                max_run_seconds = parse_duration(seconds, unset=())
            except DurationError:
                raise LimitSettingError("cli.limit.badTime", got=shown(seconds)) from None
        return cls(max_steps=max_steps, max_run_seconds=max_run_seconds)


class LimitExceededError(LocalizedError):
    """The run went past one of its limits."""


def steps_exceeded(limit: int) -> LimitExceededError:
    return LimitExceededError("cli.limit.steps", limit=limit)


def time_exceeded(limit: float) -> LimitExceededError:
    return LimitExceededError("cli.limit.time", limit=f"{limit:g}")


class Deadline:
    """Calls `on_expire` once after `seconds` unless cancelled first."""

    def __init__(self, seconds: float | None, on_expire: Callable[[], None]) -> None:
        self._timer: threading.Timer | None = None
        if seconds is not None and seconds > 0:
            self._timer = threading.Timer(seconds, on_expire)
            self._timer.daemon = True

    def start(self) -> None:
        if self._timer is not None:
            self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
