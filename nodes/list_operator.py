"""List operator node: filters, picks, sorts and cuts an array, as Dify does.

Arrays of strings, numbers, booleans and files (Dify's), and arrays of objects
(firstgate's own: a condition's or the order's `key` names the field). The
steps run in Dify's order: `filter_by` (every condition must hold), then
`extract_by` (the `serial`-th item, counted from 1), then `order_by`, then
`limit` (the first `size` items). Outputs: `result`, `first_record`,
`last_record`.

A condition compares what it reads (the item; for files and objects, the
item's `key`) the way its value asks: a list value means membership (`in`,
`not in`; Dify's file `type` and `transfer_method`), a number read compares
as a number (`=`, `≠`, `<`, `≤`, `>`, `≥`; the value may be a `{{#...#}}`
template), a boolean read with `is` / `is not`, anything else as text
(`contains`, `start with`, `end with`, `is`, `is not`, `in`, `not in`,
`empty`, `not empty`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

from firstgate.common.dsl import DslModel
from firstgate.common.files import File
from firstgate.nodes.base import NodeContext, NodeResult, NodeRunError, VariableReader
from firstgate.nodes.config import BaseNodeData, OptionalSelector
from firstgate.nodes.selectors import Selector, template_selectors
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.values import jsonable, render_text
from pydantic import Field

Operator = Literal[
    "contains", "start with", "end with", "is", "in", "empty",
    "not contains", "is not", "not in", "not empty",
    "=", "≠", "<", ">", "≥", "≤",
]  # fmt: skip


class FilterCondition(DslModel):
    key: str = ""
    comparison_operator: Operator = "contains"
    value: str | list[str] | bool = ""


class FilterBy(DslModel):
    enabled: bool = False
    conditions: list[FilterCondition] = Field(default_factory=list)


class OrderBy(DslModel):
    enabled: bool = False
    key: str = ""
    value: Literal["asc", "desc"] = "asc"


class Limit(DslModel):
    enabled: bool = False
    size: int = -1


class ExtractBy(DslModel):
    enabled: bool = False
    serial: str = "1"


class Data(BaseNodeData):
    variable: OptionalSelector = None
    filter_by: FilterBy = Field(default_factory=FilterBy)
    order_by: OrderBy = Field(default_factory=OrderBy)
    limit: Limit = Field(default_factory=Limit)
    extract_by: ExtractBy = Field(default_factory=ExtractBy)


def selectors(data: Data) -> list[Selector]:
    found: list[Selector] = [data.variable] if data.variable is not None else []
    if data.filter_by.enabled:
        for condition in data.filter_by.conditions:
            if isinstance(condition.value, str):
                found.extend(template_selectors(condition.value))
    if data.extract_by.enabled:
        found.extend(template_selectors(data.extract_by.serial))
    return found


def output_names(data: Data) -> set[str]:
    return {"result", "first_record", "last_record"}


def _field(item: Any, key: str) -> Any:
    """What a condition or the order reads of an item: a file's or an object's `key`."""
    if isinstance(item, File):
        return item.attribute(key)
    if isinstance(item, dict):
        return item.get(key)
    return item


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_TEXT: dict[str, Callable[[str, str], bool]] = {
    "contains": lambda x, v: v in x,
    "not contains": lambda x, v: v not in x,
    "start with": lambda x, v: x.startswith(v),
    "end with": lambda x, v: x.endswith(v),
    "is": lambda x, v: x == v,
    "is not": lambda x, v: x != v,
    "in": lambda x, v: x in v,
    "not in": lambda x, v: x not in v,
    "empty": lambda x, v: not x,
    "not empty": lambda x, v: bool(x),
}
_NUMBER: dict[str, Callable[[float, float], bool]] = {
    "=": lambda x, v: x == v,
    "≠": lambda x, v: x != v,
    "<": lambda x, v: x < v,
    "≤": lambda x, v: x <= v,
    ">": lambda x, v: x > v,
    "≥": lambda x, v: x >= v,
}


def _bad(condition: FilterCondition, kind: str) -> NodeRunError:
    return NodeRunError(
        "errors.listOperator.condition",
        operator=condition.comparison_operator,
        kind=kind,
    )


def _test(
    condition: FilterCondition, sample: Any, variables: VariableReader
) -> Callable[[Any], bool]:
    """The test one condition makes of what it reads (`sample`: one of those values)."""
    op, value = condition.comparison_operator, condition.value
    if isinstance(value, list):
        if op not in ("in", "not in"):
            raise _bad(condition, "list")
        members = [str(v) for v in value]
        return lambda x: (str(x) in members) == (op == "in")
    if _is_number(sample):
        if op not in _NUMBER or isinstance(value, bool):
            raise _bad(condition, "number")
        text = render_text(value, variables).strip()
        try:
            number = float(text)
        except ValueError:
            raise NodeRunError("errors.listOperator.notNumber", value=text[:80]) from None
        if not math.isfinite(number):
            raise NodeRunError("errors.listOperator.notNumber", value=text[:80])
        compare = _NUMBER[op]
        return lambda x: _is_number(x) and compare(float(x), number)
    if isinstance(sample, bool) or isinstance(value, bool):
        if op not in ("is", "is not"):
            raise _bad(condition, "boolean")
        wanted = value if isinstance(value, bool) else str(value).strip().lower() == "true"
        return lambda x: (x is wanted) == (op == "is")
    if op not in _TEXT:
        raise _bad(condition, "text")
    text = render_text(value, variables)
    check = _TEXT[op]
    return lambda x: check("" if x is None else str(x), text)


def _filter(items: list[Any], data: Data, variables: VariableReader) -> list[Any]:
    for condition in data.filter_by.conditions:
        if not items:
            break
        read = [_field(item, condition.key) for item in items]
        sample = next((r for r in read if r is not None), None)
        test = _test(condition, sample, variables)
        items = [item for item, value in zip(items, read, strict=True) if test(value)]
    return items


def _extract(items: list[Any], data: Data, variables: VariableReader) -> list[Any]:
    text = render_text(data.extract_by.serial, variables).strip()
    if not text.lstrip("-").isdigit():
        raise NodeRunError("errors.listOperator.serial", serial=text[:80], size=len(items))
    serial = int(text)
    if not 1 <= serial <= len(items):
        raise NodeRunError("errors.listOperator.serial", serial=serial, size=len(items))
    return [items[serial - 1]]


def _order(items: list[Any], data: Data) -> list[Any]:
    key = data.order_by.key
    keyed = [(_field(item, key) if key else item, item) for item in items]
    # Items with nothing to sort by go last, whatever the direction.
    present = [pair for pair in keyed if pair[0] is not None]
    missing = [item for value, item in keyed if value is None]
    try:
        present.sort(key=lambda pair: pair[0], reverse=data.order_by.value == "desc")
    except TypeError:
        raise NodeRunError("errors.listOperator.order", key=key or "(item)") from None
    return [item for _, item in present] + missing


def run(data: Data, ctx: NodeContext) -> NodeResult:
    if data.variable is None:
        raise NodeRunError("errors.listOperator.noVariable")
    value = ctx.variables.get(data.variable)
    name = ".".join(data.variable)
    if value is None:
        raise NodeRunError("errors.listOperator.notFound", selector=name)
    if not isinstance(value, list | tuple):
        raise NodeRunError("errors.listOperator.notArray", selector=name, got=type(value).__name__)
    items = list(value)
    inputs = {"variable": jsonable(items)}
    if items:
        if data.filter_by.enabled:
            items = _filter(items, data, ctx.variables)
        if data.extract_by.enabled:
            items = _extract(items, data, ctx.variables)
        if data.order_by.enabled:
            items = _order(items, data)
        if data.limit.enabled and data.limit.size >= 0:
            items = items[: data.limit.size]
    outputs = {
        "result": items,
        "first_record": items[0] if items else None,
        "last_record": items[-1] if items else None,
    }
    return NodeResult(outputs=outputs, inputs=inputs, process_data=inputs)


SPEC = NodeSpec(
    type="list-operator",
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=False,
    inline=True,
)
