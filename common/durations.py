"""The one parser for duration settings: seconds or milliseconds, 0, empty, "auto".

Every timeout, budget and cap in firstgate is read through `parse_duration`:
the gate's budgets, the first-token budget's environment variables and
settings-file keys, the fallback caps, the probe timeout and the DSL's
millisecond fields. It answers one of three things:

- `None`: "not set here" (None, and the words in `unset`: by default "" and
  "auto"); the next level of precedence (or "auto") decides;
- a finite number >= 0 in the unit it was written in (0 is returned as 0:
  whether 0 disables the deadline or is refused is the caller's rule, and
  for deadlines it always disables, never "fire at once");
- `DurationError`, whose `reason` says what is wrong, for anything else.
  Each caller turns it into its own located, translated error.
"""

from __future__ import annotations

import math
from typing import Literal

Reason = Literal["not_a_number", "not_finite", "negative", "zero", "not_whole"]
AUTO = "auto"
UNSET_WORDS: tuple[str, ...] = ("", AUTO)


class DurationError(ValueError):
    """A duration setting that is not a duration; `reason` says why."""

    def __init__(self, reason: Reason, value: object) -> None:
        super().__init__(f"{reason}: {value!r}"[:80])
        self.reason: Reason = reason
        self.value = value


def is_unset(value: object, unset: tuple[str, ...] = UNSET_WORDS) -> bool:
    """None, or one of the words that mean "not set here"."""
    return value is None or (isinstance(value, str) and value.strip().lower() in unset)


def parse_duration(
    value: object,
    *,
    strings: bool = True,
    unset: tuple[str, ...] = UNSET_WORDS,
    whole: bool = False,
    zero: bool = True,
) -> float | None:
    """The number a duration setting holds (in its own unit), or None when unset.

    `strings`: a numeric string ("1.5") counts (environment variables, YAML
    written by hand); without it only int and float do (a Python API).
    `unset`: the words that mean "not set here" when `strings` is on.
    `whole`: only whole numbers (the DSL's milliseconds). `zero`: 0 is a value
    (False: refused, e.g. a probe timeout of 0 s).
    """
    if value is None or (strings and is_unset(value, unset)):
        return None
    if isinstance(value, str) and strings:
        try:
            number = float(value.strip())
        except ValueError:
            raise DurationError("not_a_number", value) from None
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise DurationError("not_a_number", value)
    else:
        number = float(value)
    if not math.isfinite(number):
        raise DurationError("not_finite", value)
    if number < 0:
        raise DurationError("negative", value)
    if number == 0 and not zero:
        raise DurationError("zero", value)
    if whole and not number.is_integer():
        raise DurationError("not_whole", value)
    return number


def positive_or_none(value: object) -> float | None:
    """The lenient rule of API budgets and fallback caps: a positive finite number
    is itself; 0, negative, NaN or infinite mean "none" (never "fire at once");
    anything that is not a number at all raises `DurationError`."""
    try:
        number = parse_duration(value, strings=False)
    except DurationError as error:
        if error.reason in ("negative", "not_finite"):
            return None
        raise
    return number or None


def require_positive_seconds(value: object, what: str) -> float:
    """A Python API argument that must be a positive finite number of seconds."""
    try:
        seconds = parse_duration(value, strings=False, zero=False)
    except DurationError:
        seconds = None
    if seconds is None:
        raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")
    return seconds
