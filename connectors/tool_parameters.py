"""What a tool declares about its parameters, and Dify's rules for turning the
values a workflow supplies into the values the tool receives.

Dify casts every value by its parameter's declared type before the call
(`"3"` becomes 3 for a number, `"yes"` becomes True for a boolean, a JSON
string becomes a list for an array), fills in declared defaults, and refuses
a call that lacks a required parameter. A value that cannot be cast is a
`ToolParameterError` naming the parameter and the type.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from firstgate.connectors.tool_messages import ToolError


class ToolParameterError(ToolError):
    message_key = "errors.tool.parameter"


class ParamType(StrEnum):
    STRING = "string"
    NUMBER = "number"
    BOOLEAN = "boolean"
    SELECT = "select"
    SECRET_INPUT = "secret-input"
    ARRAY = "array"
    OBJECT = "object"
    FILE = "file"
    FILES = "files"
    ANY = "any"


_SCHEMA_TYPES = {
    "string": ParamType.STRING,
    "integer": ParamType.NUMBER,
    "number": ParamType.NUMBER,
    "boolean": ParamType.BOOLEAN,
    "array": ParamType.ARRAY,
    "object": ParamType.OBJECT,
}


def schema_type(schema: Any) -> ParamType:
    """The parameter type of a JSON Schema (MCP input schemas, OpenAPI parameters)."""
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    return _SCHEMA_TYPES.get(str(kind), ParamType.ANY)


@dataclass(frozen=True, slots=True)
class ToolParameter:
    name: str
    type: ParamType = ParamType.STRING
    required: bool = False
    default: Any = None
    # "form": set in the node's configuration; "llm": a per-call input.
    form: str = "llm"
    options: tuple[str, ...] = ()


_TRUE = frozenset({"true", "yes", "y", "1"})
_FALSE = frozenset({"false", "no", "n", "0"})


def _number(value: str) -> int | float:
    text = value.strip()
    return float(text) if "." in text or "e" in text.lower() else int(text)


def _decoded(value: str, kind: type) -> Any:
    try:
        decoded = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return decoded if isinstance(decoded, kind) else None


def cast(parameter: ToolParameter, value: Any) -> Any:
    """`value` as the tool receives it (Dify's cast_parameter_value)."""
    kind = parameter.type
    if kind in (ParamType.STRING, ParamType.SELECT, ParamType.SECRET_INPUT):
        if value is None:
            return ""
        if isinstance(value, str):
            return value
        if isinstance(value, dict | list):
            return json.dumps(value, ensure_ascii=False)
        return str(value)
    if kind is ParamType.BOOLEAN:
        if isinstance(value, str):
            lowered = value.strip().lower()
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
        return bool(value)
    if kind is ParamType.NUMBER:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip():
            try:
                return _number(value)
            except ValueError:
                pass
        raise ToolParameterError(name=parameter.name, type=kind.value, got=_shown(value))
    if kind is ParamType.ARRAY:
        if isinstance(value, list):
            return value
        decoded = _decoded(value, list) if isinstance(value, str) else None
        return decoded if decoded is not None else [value]
    if kind is ParamType.OBJECT:
        if isinstance(value, dict):
            return value
        decoded = _decoded(value, dict) if isinstance(value, str) else None
        if decoded is None:
            raise ToolParameterError(name=parameter.name, type=kind.value, got=_shown(value))
        return decoded
    if kind is ParamType.FILES and not isinstance(value, list):
        return [value]
    return value


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return repr(text[:60] + ("…" if len(text) > 60 else ""))


def prepare(declared: Iterable[ToolParameter], values: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of one call: declared parameters cast and defaulted, a
    missing required one refused; values the tool does not declare pass as given."""
    arguments = dict(values)
    for parameter in declared:
        value = arguments.get(parameter.name)
        if value is None:
            value = parameter.default
        if value is None:
            if parameter.required:
                raise ToolParameterError("errors.tool.missingParameter", name=parameter.name)
            arguments.pop(parameter.name, None)
            continue
        arguments[parameter.name] = cast(parameter, value)
    return arguments
