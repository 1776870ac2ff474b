"""The DSL's model base and how a DSL mistake becomes a message.

Every model read from a workflow file or the settings file (nodes, the
document around them, every settings section) is a `DslModel`. A validator
raises `dsl_error(message_key, english, **params)` (a pydantic custom error):
the loader turns that into a located problem and renders it through
`locales`. `shown` quotes a value in such a message (JSON, cut to
`QUOTE_LIMIT`); `between` bounds an integer field, `Milliseconds` reads the
DSL's millisecond fields through the one duration parser.
"""

from __future__ import annotations

import json
import math
import reprlib
from typing import Annotated, Any

from firstgate.common.durations import DurationError, parse_duration
from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

# At most this much of a value is quoted in a message: a value can be megabytes
# (or an alias bomb), and a message must stay a line a person can read.
QUOTE_LIMIT = 200
_QUOTER = json.JSONEncoder(ensure_ascii=False, default=str)


def shown(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """How a value is quoted in a message: JSON, so strings keep their quotes,
    cut to `limit` characters. Encoded lazily: a huge value is never written out."""
    parts: list[str] = []
    length = 0
    try:
        for chunk in _QUOTER.iterencode(value):
            parts.append(chunk)
            length += len(chunk)
            if length > limit:
                break
        text = "".join(parts)
    except (TypeError, ValueError, RecursionError):  # circular or absurdly deep
        text = reprlib.repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def dsl_error(key: str, english: str, **params: Any) -> PydanticCustomError:
    return PydanticCustomError(key, english, params)


def note_warning(context: Any, key: str, **params: Any) -> None:
    """Report what Dify loads but reads in its own way (the loader puts a list
    in the validation context, then locates each entry at its node)."""
    found = context.get("warnings") if isinstance(context, dict) else None
    if isinstance(found, list):
        found.append((key, params))


def _as_int(value: Any) -> int | None:
    """An integer from an int, an integral float or a digit string; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def between(lo: int, hi: int) -> BeforeValidator:
    """An integer field's bounds: `Annotated[int, between(0, 10)]`; integral floats
    and digit strings are accepted, anything else is a `dsl.intRange` problem."""

    def check(value: Any) -> int:
        number = _as_int(value)
        if number is None or not lo <= number <= hi:
            raise dsl_error(
                "dsl.intRange",
                "must be an integer between {min} and {max}, got {got}",
                min=lo,
                max=hi,
                got=shown(value),
            )
        return number

    return BeforeValidator(check)


def _milliseconds(value: Any) -> int | None:
    try:
        number = parse_duration(value, unset=("",), whole=True)
    except DurationError:
        raise dsl_error(
            "dsl.milliseconds",
            "must be a whole number of milliseconds (0 or empty disables it), got {got}",
            got=shown(value),
        ) from None
    return None if number is None else int(number)


Milliseconds = Annotated[int | None, BeforeValidator(_milliseconds)]


def _positive_seconds(value: Any) -> float | None:
    try:
        return parse_duration(value, strings=False, zero=False)
    except DurationError:
        raise dsl_error(
            "dsl.models.positiveSeconds",
            "must be a positive number of seconds, got {got}",
            got=shown(value),
        ) from None


# A settings duration: a positive number of seconds, or empty.
PositiveSeconds = Annotated[float | None, BeforeValidator(_positive_seconds)]


class DslModel(BaseModel):
    """Unknown keys the editor writes (positions, icons, UI state) are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class SettingsModel(DslModel):
    """A section of the settings file (or a part of one). Unlike an export, the
    file is the operator's own: a key no model reads (misspelt, or renamed by an
    upgrade) is a located problem at load time, never silently a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)
