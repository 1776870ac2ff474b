"""Run limits: steps and wall-clock time. Time is a `Deadline` on the monotonic
clock, like every other deadline here (the gate's, the sandbox's): nothing
waits for it on its own. The dispatcher bounds its wait for the next event by
the time the run has left and checks it between the nodes it runs itself, so a
node blocked on a socket cannot outlast it, and no timer thread is needed.

What a limit stops: when it passes, the run's cancel token is cancelled, which
shuts every in-flight model stream down through its gate (and every other
cancellable wait: HTTP requests, sandboxed code, waits between retries); the
run then ends as failed within `DRAIN_GRACE_S` (engine). What it cannot stop:
Python code running in a worker thread of this process (a thread cannot be
killed), so a CPU-bound node that runs in-process goes on burning CPU after
the run has ended, until it returns. Code nodes and heavy templates run in the
sandbox's processes, which are killed.
"""

from __future__ import annotations

import time
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


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a run must have ended, on a monotonic clock; `at` None: never."""

    at: float | None
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def after(cls, seconds: float | None, clock: Callable[[], float] = time.monotonic) -> Deadline:
        """The deadline `seconds` from now (None or 0: none)."""
        return cls(clock() + seconds if seconds else None, clock)

    def remaining(self) -> float | None:
        """Seconds left (0 once passed); None without a deadline: wait as long as it takes."""
        if self.at is None:
            return None
        return max(0.0, self.at - self.clock())

    def passed(self) -> bool:
        return self.at is not None and self.clock() >= self.at
