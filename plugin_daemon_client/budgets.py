"""The gate's budgets as one value object (in the spirit of `httpx.Timeout`).

A budget is seconds, or None for "disabled". None, 0, negative, NaN and
infinite all mean disabled, never "fire at once": an editor field left at 0
must not turn every request into an instant failure. Anything that is not a
real number (strings, booleans) is a configuration mistake and is rejected.
"""

from __future__ import annotations

from dataclasses import dataclass

from firstgate.common.durations import DurationError, positive_or_none

from .errors import GateConfigError

DEFAULT_CEILING_S = 1800.0


def coerce_budget(name: str, value: object) -> float | None:
    try:
        return positive_or_none(value)
    except DurationError:
        raise GateConfigError(name=name, value=repr(value)[:60]) from None


@dataclass(frozen=True, slots=True)
class GateBudgets:
    """Relative budgets in seconds; None means that deadline is disabled."""

    first_token: float | None = None
    idle: float | None = None
    stream_total: float | None = None
    # Absolute bound on how long the watchdog may keep extending the first-token wait.
    ceiling: float | None = DEFAULT_CEILING_S

    @classmethod
    def build(
        cls,
        first_token_timeout: object = None,
        idle_timeout: object = None,
        stream_total_timeout: object = None,
        ceiling: object = DEFAULT_CEILING_S,
    ) -> GateBudgets:
        return cls(
            first_token=coerce_budget("first_token_timeout", first_token_timeout),
            idle=coerce_budget("idle_timeout", idle_timeout),
            stream_total=coerce_budget("stream_total_timeout", stream_total_timeout),
            ceiling=coerce_budget("ceiling", ceiling),
        )
