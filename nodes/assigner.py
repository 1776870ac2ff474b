"""Variable assigner: writes conversation variables and loop variables.

Version 1 (`assigned_variable_selector`, `input_variable_selector`,
`write_mode` over-write / append / clear) writes one variable; version 2
(`items`) applies a list of operations in order: over-write, clear, set,
append, extend, remove-first, remove-last, +=, -=, *=, /=. Each value is
checked against the variable's declared type, as Dify checks it. The writes
take effect when the node succeeds (`NodeResult.updates`); the runtime keeps
them with the conversation when the turn succeeds.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from firstgate.common.dsl import DslModel
from firstgate.common.value_types import empty_value, fits, fits_item, type_of
from firstgate.nodes.base import Needs, NodeContext, NodeResult, NodeRunError, VariableReader
from firstgate.nodes.config import BaseNodeData, OptionalSelector
from firstgate.nodes.selectors import Selector
from firstgate.nodes.spec import NodeSpec
from pydantic import BeforeValidator, Field

Operation = Literal[
    "over-write",
    "clear",
    "set",
    "append",
    "extend",
    "remove-first",
    "remove-last",
    "+=",
    "-=",
    "*=",
    "/=",
]
_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.add,
    "-=": operator.sub,
    "*=": operator.mul,
    "/=": operator.truediv,
}
_ARRAY_ONLY = frozenset({"append", "extend", "remove-first", "remove-last"})


def _version(value: Any) -> str:
    return str(value) if value not in (None, "") else "1"


class Item(DslModel):
    variable_selector: OptionalSelector = None
    input_type: Literal["variable", "constant"] = "variable"
    operation: Operation = "over-write"
    value: Any = None


class Data(BaseNodeData):
    version: Annotated[str, BeforeValidator(_version)] = "1"
    # Version 1.
    assigned_variable_selector: OptionalSelector = None
    input_variable_selector: OptionalSelector = None
    write_mode: Literal["over-write", "append", "clear"] = "over-write"
    # Version 2.
    items: list[Item] = Field(default_factory=list)

    @property
    def operations(self) -> list[Item]:
        if self.version == "1" and not self.items:
            if self.assigned_variable_selector is None:
                return []
            return [
                Item(
                    variable_selector=self.assigned_variable_selector,
                    input_type="variable",
                    operation=self.write_mode,
                    value=self.input_variable_selector,
                )
            ]
        return list(self.items)


def _value_selector(item: Item) -> Selector | None:
    if item.input_type != "variable" or item.operation in ("clear", "remove-first", "remove-last"):
        return None
    value = item.value
    if (
        isinstance(value, list | tuple)
        and len(value) >= 2
        and all(isinstance(v, str) for v in value)
    ):
        return tuple(value)
    return None


def selectors(data: Data) -> list[Selector]:
    found: list[Selector] = []
    for item in data.operations:
        if item.variable_selector is not None:
            found.append(item.variable_selector)
        source = _value_selector(item)
        if source is not None:
            found.append(source)
    return found


def output_names(data: Data) -> set[str]:
    return set()


def needs(data: Data) -> Needs:
    return Needs(
        writes=frozenset(
            item.variable_selector for item in data.operations if item.variable_selector
        )
    )


def written(data: Data) -> list[Selector]:
    """The variables this node writes (the loader checks they are declared)."""
    return [item.variable_selector for item in data.operations if item.variable_selector]


@dataclass(frozen=True, slots=True)
class _Target:
    selector: Selector
    name: str
    value_type: str


def _declared_type(variables: VariableReader, selector: Selector, current: Any) -> str:
    declared = getattr(variables, "value_type", None)
    found = declared(selector) if callable(declared) else None
    if found:
        return str(found)
    return type_of(current)


def _bad_value(target: _Target, value: Any) -> NodeRunError:
    return NodeRunError(
        "errors.assigner.valueType",
        variable=target.name,
        type=target.value_type,
        got=type(value).__name__,
    )


def _apply(target: _Target, item: Item, current: Any, value: Any) -> Any:
    op = item.operation
    kind = target.value_type
    unsupported = NodeRunError(
        "errors.assigner.operation", operation=op, variable=target.name, type=kind
    )
    if op == "clear":
        return empty_value(kind)
    if op in ("over-write", "set"):
        if not fits(kind, value):
            raise _bad_value(target, value)
        return value
    if op in _ARRAY_ONLY:
        if not kind.startswith("array"):
            raise unsupported
        items = list(current or [])
        if op == "remove-first":
            return items[1:]
        if op == "remove-last":
            return items[:-1]
        if op == "append":
            if not fits_item(kind, value):
                raise _bad_value(target, value)
            return [*items, value]
        if not isinstance(value, list) or not fits(kind, value):
            raise _bad_value(target, value)
        return [*items, *value]
    # Arithmetic.
    if kind not in ("number", "integer"):
        raise unsupported
    if not fits("number", value):
        raise _bad_value(target, value)
    if op == "/=" and value == 0:
        raise NodeRunError("errors.assigner.divideByZero", variable=target.name)
    return _ARITHMETIC[op](current or 0, value)


def run(data: Data, ctx: NodeContext) -> NodeResult:
    updates: dict[Selector, Any] = {}
    changed: list[dict[str, Any]] = []
    for item in data.operations:
        selector = item.variable_selector
        if selector is None:
            raise NodeRunError("errors.assigner.noVariable")
        # A later item sees what an earlier one wrote.
        current = updates[selector] if selector in updates else ctx.variables.get(selector)
        target = _Target(
            selector, ".".join(selector[1:]), _declared_type(ctx.variables, selector, current)
        )
        source = _value_selector(item)
        value = ctx.variables.get(source) if source is not None else item.value
        updates[selector] = _apply(target, item, current, value)
        changed.append(
            {
                "name": target.name,
                "selector": list(selector),
                "value_type": target.value_type,
                "new_value": updates[selector],
            }
        )
    return NodeResult(outputs={}, updates=updates, process_data={"updated_variables": changed})


SPEC = NodeSpec(
    type="assigner",
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=False,
    needs=needs,
    inline=True,
)
