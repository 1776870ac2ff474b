"""Start node: declares the workflow's inputs and checks what the caller passed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from nodes.base import NodeContext, NodeResult, NodeRunError
from nodes.config import BaseNodeData, DslModel
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
            got=repr(raw),
        )

    if spec.type == "number":
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return raw
        try:
            number = float(str(raw))
        except ValueError:
            raise bad("a number") from None
        return int(number) if number.is_integer() and "." not in str(raw) else number
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
        value = raw
        if isinstance(raw, str):
            try:
                value = json.loads(raw)
            except ValueError:
                raise bad("a JSON object") from None
        if not isinstance(value, dict):
            raise bad("a JSON object")
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
