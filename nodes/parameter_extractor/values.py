"""The parameter extractor's typed values: the types a parameter may have,
the JSON schema the model is asked to fill, and Dify's two passes over what
the model answered (from Dify's tests):

1. `check(parameters, result)`: the answer must have exactly one value per
   parameter, every required parameter, each value of its declared type
   (booleans count as numbers, as in Dify), a `select` value among its
   options. The first problem found is the reason `__is_success` is 0.
2. `coerce(parameters, result)`: every parameter gets a value of its type
   whatever the answer held: numbers from numeric text (`"19.5"` -> 19.5,
   `True` -> 1), booleans from booleans or integers, array items of the wrong
   type dropped, and anything missing or unusable replaced by the type's
   empty value (`""`, `0`, `False`, `[]`).

Both passes always run: a value the model wrote as `"25"` for a number is a
failed check (`__is_success: 0` with the reason) *and* the output 25.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from firstgate.nodes.base import NodeRunError

ParameterType = Literal[
    "string",
    "number",
    "boolean",
    "select",
    "array[string]",
    "array[number]",
    "array[object]",
    "array[boolean]",
]
# Older exports: `bool` is `boolean`.
LEGACY_TYPES = {"bool": "boolean"}
PARAMETER_TYPES: tuple[str, ...] = (
    "string",
    "number",
    "boolean",
    "select",
    "array[string]",
    "array[number]",
    "array[object]",
    "array[boolean]",
)
_UNSET = object()


class ExtractionProblem(NodeRunError):
    """Why an extraction is not a success (becomes `__reason`; the node still succeeds)."""


@dataclass(frozen=True, slots=True)
class Parameter:
    name: str
    type: str
    description: str = ""
    required: bool = False
    options: tuple[str, ...] = ()

    @property
    def element(self) -> str | None:
        """The item type of an array parameter, else None."""
        return self.type[6:-1] if self.type.startswith("array[") else None


def json_schema(parameters: Sequence[Parameter]) -> dict[str, Any]:
    """The object schema the model fills (Dify's shape: one property per parameter,
    `enum` for options, the required ones listed)."""
    properties: dict[str, Any] = {}
    for parameter in parameters:
        spec: dict[str, Any] = {"description": parameter.description}
        element = parameter.element
        if element is not None:
            spec["type"] = "array"
            spec["items"] = {"type": element}
        else:
            spec["type"] = "string" if parameter.type == "select" else parameter.type
        if parameter.options:
            spec["enum"] = list(parameter.options)
        properties[parameter.name] = spec
    return {
        "type": "object",
        "properties": properties,
        "required": [p.name for p in parameters if p.required],
    }


# --- the check -----------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float)  # bool is an int here, as in Dify


_ITEM_CHECKS = {
    "string": lambda v: isinstance(v, str),
    "number": _is_number,
    "object": lambda v: isinstance(v, dict),
    "boolean": lambda v: isinstance(v, bool),
}


def _fits(parameter: Parameter, value: Any) -> bool:
    element = parameter.element
    if element is not None:
        return isinstance(value, list) and all(_ITEM_CHECKS[element](item) for item in value)
    if parameter.type in ("string", "select"):
        return isinstance(value, str)
    if parameter.type == "number":
        return _is_number(value)
    return isinstance(value, bool)


def type_name(value: Any) -> str:
    """The type a value was found to have, in Dify's words."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        kinds = {type_name(item) for item in value}
        kinds = {"number" if k in ("integer", "float") else k for k in kinds}
        return f"array[{kinds.pop()}]" if len(kinds) == 1 else "array[any]"
    return type(value).__name__


def check(parameters: Sequence[Parameter], result: Mapping[str, Any]) -> None:
    """Raise the first `ExtractionProblem` of the answer (see the module docstring)."""
    if len(parameters) != len(result):
        raise ExtractionProblem("errors.extractor.count", expected=len(parameters), got=len(result))
    for parameter in parameters:
        if parameter.required and parameter.name not in result:
            raise ExtractionProblem("errors.extractor.required", name=parameter.name)
        value = result.get(parameter.name)
        if not _fits(parameter, value):
            raise ExtractionProblem(
                "errors.extractor.type",
                name=parameter.name,
                expected="string" if parameter.type == "select" else parameter.type,
                got=type_name(value),
            )
        if parameter.options and value not in parameter.options:
            raise ExtractionProblem("errors.extractor.option", name=parameter.name)


# --- the coercion --------------------------------------------------------------------


def _number(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return value if math.isfinite(value) else _UNSET
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text) if "." in text else int(text)
        except ValueError:
            return _UNSET
        return number if math.isfinite(number) else _UNSET
    return _UNSET


def _scalar(kind: str, value: Any) -> Any:
    if kind == "number":
        return _number(value)
    if kind == "boolean":
        return bool(value) if isinstance(value, bool | int) else _UNSET
    return value if isinstance(value, str) else _UNSET  # string, select


def _item(kind: str, value: Any) -> Any:
    if kind == "number":
        return _number(value)
    if kind == "boolean":
        return value if isinstance(value, bool) else _UNSET  # no 0/1 inside arrays
    if kind == "object":
        return value if isinstance(value, dict) else _UNSET
    return value if isinstance(value, str) else _UNSET


def empty_value(parameter: Parameter) -> Any:
    if parameter.element is not None:
        return []
    return {"number": 0, "boolean": False}.get(parameter.type, "")


def coerce(parameters: Sequence[Parameter], result: Mapping[str, Any]) -> dict[str, Any]:
    """One value of its type per parameter (see the module docstring)."""
    values: dict[str, Any] = {}
    for parameter in parameters:
        raw = result.get(parameter.name, _UNSET)
        value: Any = _UNSET
        element = parameter.element
        if raw is _UNSET:
            pass
        elif element is not None:
            if isinstance(raw, list):
                items = (_item(element, item) for item in raw)
                value = [item for item in items if item is not _UNSET]
        else:
            value = _scalar(parameter.type, raw)
        values[parameter.name] = empty_value(parameter) if value is _UNSET else value
    return values


def fallback_result(parameters: Sequence[Parameter]) -> dict[str, Any]:
    """What Dify reads when the model's answer held no JSON: empty scalars only
    (no arrays, so an extractor with an array parameter also fails the count)."""
    return {p.name: empty_value(p) for p in parameters if p.element is None}
