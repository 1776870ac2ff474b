"""Dify's declared value types (`string`, `number`, `object`, `array[string]`, ...):
whether a value fits one, and a type's empty value. Conversation variables and
loop variables are declared with these; the assigner checks what it writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "secret": lambda v: isinstance(v, str),
    "number": _number,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": _number,
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
}


def fits(value_type: str, value: Any) -> bool:
    """Whether `value` is of the declared type (unknown types take anything)."""
    check = _CHECKS.get(value_type)
    if check is not None:
        return check(value)
    if value_type.startswith("array"):
        return isinstance(value, list) and all(fits_item(value_type, item) for item in value)
    return True


def fits_item(array_type: str, item: Any) -> bool:
    """Whether `item` may be an element of an array of `array_type`."""
    inner = array_type[len("array[") : -1] if array_type.startswith("array[") else "any"
    return inner in ("any", "file") or fits(inner, item)


def type_of(value: Any) -> str:
    """The declared type a value has (for variables declared without one)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array[any]"
    return "string"


def empty_value(value_type: str) -> Any:
    """What `clear` leaves: the empty value of the declared type."""
    if value_type.startswith("array"):
        return []
    return {"string": "", "secret": "", "number": 0, "integer": 0, "boolean": False}.get(
        value_type, {} if value_type == "object" else None
    )
