"""Dify's if-else comparison operators over strings, numbers, booleans and arrays."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

Operator = Literal[
    "contains", "not contains", "start with", "end with", "is", "is not",
    "empty", "not empty", "in", "not in", "all of",
    "=", "≠", ">", "<", "≥", "≤",
    "null", "not null", "exists", "not exists",
]  # fmt: skip

# Operators that compare against nothing: their `value` is ignored.
UNARY = frozenset({"empty", "not empty", "null", "not null", "exists", "not exists"})

# ASCII spellings some exports and hand-written flows use.
ALIASES = {"!=": "≠", ">=": "≥", "<=": "≤", "==": "="}


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _boolean(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    return None


def _is_empty(actual: Any) -> bool:
    return actual is None or (isinstance(actual, str | list | dict | tuple) and len(actual) == 0)


def _contains(actual: Any, expected: Any) -> bool:
    if isinstance(actual, str):
        return str(expected) in actual
    if isinstance(actual, list | tuple):
        return expected in actual or str(expected) in [str(item) for item in actual]
    return False


def _equals(actual: Any, expected: Any) -> bool:
    if isinstance(actual, bool):
        return _boolean(expected) is actual
    if isinstance(actual, int | float):
        return _number(expected) == float(actual)
    return actual is not None and str(actual) == ("" if expected is None else str(expected))


def _numeric(test: Callable[[float, float], bool]) -> Callable[[Any, Any], bool]:
    def compare(actual: Any, expected: Any) -> bool:
        left, right = _number(actual), _number(expected)
        return left is not None and right is not None and test(left, right)

    return compare


def _members(expected: Any) -> list[Any]:
    if isinstance(expected, list | tuple):
        return list(expected)
    if isinstance(expected, str):
        return [part.strip() for part in expected.split(",")] if expected else []
    return [expected]


def _in(actual: Any, expected: Any) -> bool:
    members = _members(expected)
    return actual is not None and (actual in members or str(actual) in [str(m) for m in members])


def _all_of(actual: Any, expected: Any) -> bool:
    return isinstance(actual, list | tuple) and all(
        _contains(actual, m) for m in _members(expected)
    )


_TESTS: dict[str, Callable[[Any, Any], bool]] = {
    "contains": _contains,
    "not contains": lambda a, e: not _contains(a, e),
    "start with": lambda a, e: isinstance(a, str) and a.startswith(str(e or "")),
    "end with": lambda a, e: isinstance(a, str) and a.endswith(str(e or "")),
    "is": _equals,
    "is not": lambda a, e: not _equals(a, e),
    "empty": lambda a, e: _is_empty(a),
    "not empty": lambda a, e: not _is_empty(a),
    "in": _in,
    "not in": lambda a, e: not _in(a, e),
    "all of": _all_of,
    "=": lambda a, e: (
        _numeric(lambda x, y: x == y)(a, e) if not isinstance(a, bool) else _equals(a, e)
    ),
    "≠": lambda a, e: (
        not (_numeric(lambda x, y: x == y)(a, e) if not isinstance(a, bool) else _equals(a, e))
    ),
    ">": _numeric(lambda x, y: x > y),
    "<": _numeric(lambda x, y: x < y),
    "≥": _numeric(lambda x, y: x >= y),
    "≤": _numeric(lambda x, y: x <= y),
    "null": lambda a, e: a is None,
    "not null": lambda a, e: a is not None,
    "exists": lambda a, e: a is not None,
    "not exists": lambda a, e: a is None,
}


def normalize_operator(operator: str) -> str:
    return ALIASES.get(operator, operator)


def compare(operator: str, actual: Any, expected: Any) -> bool:
    """Evaluate one condition; an operand of the wrong kind makes it false, never an error."""
    return _TESTS[normalize_operator(operator)](actual, expected)
