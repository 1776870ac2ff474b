"""Start node: declares the workflow's inputs and checks what the caller passed."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from nodes.base import NodeContext, NodeResult, NodeRunError
from nodes.config import BaseNodeData, DslModel, dsl_error, shown
from nodes.nesting import MAX_DEPTH, deeper_than
from nodes.selectors import Selector

TYPE = "start"
SUPPORTS_RETRY = False

InputType = Literal["text-input", "paragraph", "select", "number", "checkbox", "json_object"]


class InputVariable(DslModel):
    variable: str = Field(min_length=1)
    label: str = ""
    type: InputType = "text-input"
    required: bool = False
    max_length: int | None = None
    options: list[str] = Field(default_factory=list)
    default: Any = None


class Data(BaseNodeData):
    variables: list[InputVariable] = Field(default_factory=list)

    @field_validator("variables")
    @classmethod
    def _unique(cls, variables: list[InputVariable]) -> list[InputVariable]:
        seen: set[str] = set()
        for variable in variables:
            if variable.variable in seen:  # the second would silently replace the first
                raise dsl_error(
                    "dsl.start.duplicateVariable",
                    "declares the input {name} more than once",
                    name=shown(variable.variable),
                )
            seen.add(variable.variable)
        return variables


class InputError(NodeRunError):
    """The caller's inputs do not fit the start node's declaration (CLI exit 2)."""


def selectors(data: Data) -> list[Selector]:
    return []


def output_names(data: Data) -> set[str]:
    return {v.variable for v in data.variables}


def _coerce(spec: InputVariable, raw: Any) -> Any:
    def bad(expected: str) -> InputError:
        return InputError(
            "dsl.input.type",
            name=spec.variable,
            expected=expected,
            got=shown(raw),
        )

    if spec.type == "number":
        return _number(spec, raw, bad)
    if spec.type == "checkbox":
        if isinstance(raw, bool):
            return raw
        lowered = str(raw).strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off", ""):
            return False
        raise bad("true or false")
    if spec.type == "json_object":
        value = _json(spec, raw, bad) if isinstance(raw, str) else raw
        if not isinstance(value, dict):
            raise bad("a JSON object")
        if deeper_than(value):
            raise InputError("dsl.input.tooDeep", name=spec.variable, limit=MAX_DEPTH)
        return value
    text = raw if isinstance(raw, str) else str(raw)
    if spec.type == "select" and spec.options and text not in spec.options:
        raise bad("one of " + ", ".join(spec.options))
    if spec.max_length and len(text) > spec.max_length:
        raise InputError(
            "dsl.input.tooLong",
            name=spec.variable,
            max=spec.max_length,
        )
    return text


def _number(spec: InputVariable, raw: Any, bad: Callable[[str], InputError]) -> int | float:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, float):
        number = raw
    else:
        try:
            number = float(str(raw))
        except ValueError:
            raise bad("a number") from None
    if not math.isfinite(number):  # 1e999, inf, nan: not numbers a workflow can use (or print)
        raise InputError("dsl.input.notFinite", name=spec.variable, got=shown(raw))
    if isinstance(raw, float):
        return raw
    return int(number) if number.is_integer() and "." not in str(raw) else number


def _refuse_constant(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are not JSON


def _json(spec: InputVariable, raw: str, bad: Callable[[str], InputError]) -> Any:
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except ValueError:
        raise bad("a JSON object") from None
    except RecursionError:  # thousands of levels: the parser gives up before we can count
        raise InputError("dsl.input.tooDeep", name=spec.variable, limit=MAX_DEPTH) from None


def validate_inputs(data: Data, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Coerce the caller's inputs; missing optional ones take their default (or None)."""
    declared = {v.variable for v in data.variables}
    unknown = sorted(set(inputs) - declared)
    if unknown:
        raise InputError(
            "dsl.input.unknown",
            name=unknown[0],
            declared=", ".join(sorted(declared)) or "(none)",
        )
    values: dict[str, Any] = {}
    for spec in data.variables:
        raw = inputs.get(spec.variable)
        if raw is None or raw == "":
            if spec.default not in (None, ""):
                raw = spec.default
            elif spec.required:
                raise InputError(
                    "dsl.input.missing",
                    name=spec.variable,
                )
            else:
                values[spec.variable] = None
                continue
        values[spec.variable] = _coerce(spec, raw)
    return values


def run(data: Data, ctx: NodeContext) -> NodeResult:
    # The engine validated the inputs before the run began.
    return NodeResult(outputs=dict(ctx.inputs))
