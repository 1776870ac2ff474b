"""Run limits: steps and wall-clock time. Time is enforced by a timer, so a
node blocked on a socket cannot outlast it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from locales.localized_error import LocalizedError


@dataclass(frozen=True, slots=True)
class RunLimits:
    max_steps: int = 500  # node executions (Dify's WORKFLOW_MAX_EXECUTION_STEPS)
    max_run_seconds: float | None = 1200.0  # Dify's WORKFLOW_MAX_EXECUTION_TIME


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
