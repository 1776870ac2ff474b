"""Pydantic models for the node fields every Dify node shares: selectors, the
retry config, default values, the error strategy, `BaseNodeData`.

The model base and the error mapping (`DslModel`, `dsl_error`, `shown`) are
the floor's, `common/dsl.py`. A fixed set of words is a `Literal` type:
pydantic's `literal_error` is mapped onto the one `dsl.choice` message in
`runtime.problems`.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from firstgate.common.dsl import DslModel, between, dsl_error, shown
from firstgate.nodes.selectors import Selector
from pydantic import BeforeValidator, Field, ValidationInfo, field_validator


def _selector(value: Any) -> Selector:
    if isinstance(value, list | tuple):
        # Node ids that look like numbers may come unquoted out of YAML.
        parts = [str(p) if isinstance(p, int) and not isinstance(p, bool) else p for p in value]
        if len(parts) >= 2 and all(isinstance(part, str) and part for part in parts):
            return tuple(parts)
    raise dsl_error(
        "dsl.selector",
        "must be a variable selector like [node_id, variable], got {got}",
        got=shown(value),
    )


SelectorField = Annotated[Selector, BeforeValidator(_selector)]


def _optional_selector(value: Any) -> Selector | None:
    # The editor writes `[]` (or nothing) for a selector not chosen yet.
    if value is None or value == [] or value == ():
        return None
    return _selector(value)


OptionalSelector = Annotated[Selector | None, BeforeValidator(_optional_selector)]


class RetryConfig(DslModel):
    retry_enabled: bool = False
    max_retries: Annotated[int, between(0, 10)] = 0
    # Milliseconds between attempts. Dify's editor offers 100-5000; we allow up to a minute.
    retry_interval: Annotated[int, between(0, 60_000)] = 0


DefaultValueType = Literal[
    "string", "number", "object", "array[string]", "array[number]", "array[object]"
]


def _decode_json(value: Any) -> Any:
    # The editor stores object and array defaults as JSON text.
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def coerce_default(kind: str, value: Any) -> Any:
    """Coerce a `default_value` entry to its declared type, or raise a DSL error."""
    if kind == "string" and isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    if kind == "number":
        if _is_number(value):
            return value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if math.isfinite(number):
                return int(number) if number.is_integer() and "." not in value else number
    if kind == "object":
        decoded = _decode_json(value)
        if isinstance(decoded, dict):
            return decoded
    if kind.startswith("array["):
        decoded = _decode_json(value)
        item_ok = {
            "array[string]": lambda item: isinstance(item, str),
            "array[number]": _is_number,
            "array[object]": lambda item: isinstance(item, dict),
        }[kind]
        if isinstance(decoded, list) and all(item_ok(item) for item in decoded):
            return decoded
    raise dsl_error(
        "dsl.defaultValue.type", "must be of type {type}, got {got}", type=kind, got=shown(value)
    )


class DefaultValue(DslModel):
    key: Annotated[str, Field(min_length=1)]
    type: DefaultValueType
    value: Any = None

    @field_validator("value")
    @classmethod
    def _coerce(cls, value: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("type")
        return value if kind is None else coerce_default(kind, value)


ErrorStrategy = Literal["fail-branch", "default-value"]


def _no_strategy(value: Any) -> Any:
    # The editor writes "none" (or nothing) for "no error handling".
    return None if value in ("", "none") else value


class BaseNodeData(DslModel):
    """Fields every node may carry; each node type subclasses this."""

    type: str
    title: str = ""
    desc: str = ""
    error_strategy: Annotated[ErrorStrategy | None, BeforeValidator(_no_strategy)] = None
    default_value: list[DefaultValue] = Field(default_factory=list)
    retry_config: RetryConfig = Field(default_factory=RetryConfig)
