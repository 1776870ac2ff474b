"""A code node's outputs, checked the way Dify checks them.

Declared outputs (`outputs: {name: {type, children}}`) must all be present,
each of its type, and nothing undeclared may come back. Strings, arrays and
numbers are held to the executor's `OutputLimits` (Dify's `CODE_MAX_*`
settings), objects to a nesting depth. An `object` (or `array[object]`)
declared without `children` is checked untyped: any JSON value, recursively,
with the same limits. Where Dify is lenient, so is this: a `boolean` output
takes any value, a boolean in a `number` output becomes 0 or 1, `None` stands
in for a missing string, object or array. One departure: NaN and infinities
are refused as out of range (they are not JSON).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Protocol

from firstgate.nodes.base import NodeRunError
from firstgate.sandbox.executor import OutputLimits


class CodeNodeError(NodeRunError):
    """What `main` returned does not match the node's declared outputs."""


class OutputValidationError(CodeNodeError):
    pass


class DepthLimitError(CodeNodeError):
    pass


class OutputSpec(Protocol):
    type: str
    children: Mapping[str, OutputSpec] | None


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _wrong(path: str, expected: str, value: Any) -> OutputValidationError:
    return OutputValidationError(
        "errors.code.output.type", path=path, expected=expected, got=_type_name(value)
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float)  # bool included, as in Dify


class OutputChecker:
    def __init__(self, limits: OutputLimits) -> None:
        self.limits = limits

    # ---- scalars

    def string(self, value: str | None, path: str) -> str | None:
        if value is None:
            return None
        if len(value) > self.limits.max_string_length:
            raise OutputValidationError(
                "errors.code.output.stringLength", path=path, limit=self.limits.max_string_length
            )
        return value.replace("\x00", "")

    def number(self, value: int | float, path: str) -> int | float:
        limits = self.limits
        finite = not isinstance(value, float) or math.isfinite(value)
        if not finite or value > limits.max_number or value < limits.min_number:
            raise OutputValidationError(
                "errors.code.output.numberRange",
                path=path,
                min=limits.min_number,
                max=limits.max_number,
            )
        if isinstance(value, float):
            exponent = Decimal(str(value)).normalize().as_tuple().exponent
            digits = -exponent if isinstance(exponent, int) and exponent < 0 else 0
            if digits > limits.max_precision:
                raise OutputValidationError(
                    "errors.code.output.precision", path=path, limit=limits.max_precision
                )
        return int(value) if isinstance(value, bool) else value

    def _depth(self, path: str, depth: int) -> None:
        if depth > self.limits.max_depth:
            raise DepthLimitError(
                "errors.code.output.depth", path=path or "(result)", limit=self.limits.max_depth
            )

    def _length(self, value: list[Any], limit: int, path: str) -> None:
        if len(value) > limit:
            raise OutputValidationError("errors.code.output.arrayLength", path=path, limit=limit)

    # ---- declared outputs

    def check(
        self,
        result: Mapping[str, Any],
        schema: Mapping[str, OutputSpec] | None,
        prefix: str = "",
        depth: int = 1,
    ) -> dict[str, Any]:
        self._depth(prefix, depth)
        if schema is None:
            for name, value in result.items():
                self.untyped(value, _path(prefix, name), depth)
            return dict(result)
        checked: dict[str, Any] = {}
        for name, spec in schema.items():
            path = _path(prefix, name)
            if name not in result:
                raise OutputValidationError("errors.code.output.missing", path=path)
            checked[name] = self.typed(result[name], spec, path, depth)
        extra = [name for name in result if name not in schema]
        if extra:
            raise CodeNodeError(
                "errors.code.output.undeclared", names=", ".join(sorted(map(str, extra)))
            )
        return checked

    def typed(self, value: Any, spec: OutputSpec, path: str, depth: int) -> Any:
        kind = spec.type
        if kind == "boolean":
            return value  # Dify does not check booleans
        if kind == "string":
            if value is not None and not isinstance(value, str):
                raise _wrong(path, "string", value)
            return self.string(value, path)
        if kind == "number":
            if value is None:
                return None
            if not _is_number(value):
                raise _wrong(path, "number", value)
            return self.number(value, path)
        if value is None:
            return None
        if kind == "object":
            if not isinstance(value, dict):
                raise _wrong(path, "object", value)
            return self.check(value, spec.children, path, depth + 1)
        if not isinstance(value, list):
            raise _wrong(path, kind, value)
        return self.array(value, spec, path, depth)

    def array(self, value: list[Any], spec: OutputSpec, path: str, depth: int) -> list[Any]:
        limits = self.limits
        kind = spec.type
        items = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
        if kind == "array[number]":
            self._length(value, limits.max_number_array_length, path)
            for where, item in items:
                if not _is_number(item):
                    raise _wrong(where, "number", item)
            return [int(item) if isinstance(item, bool) else item for item in value]
        if kind == "array[string]":
            self._length(value, limits.max_string_array_length, path)
            for where, item in items:
                if item is not None and not isinstance(item, str):
                    raise _wrong(where, "string", item)
            return [self.string(item, where) for where, item in items]
        if kind == "array[object]":
            self._length(value, limits.max_object_array_length, path)
            for where, item in items:
                if item is not None and not isinstance(item, dict):
                    raise _wrong(where, "object", item)
            return [
                None if item is None else self.check(item, spec.children, where, depth + 1)
                for where, item in items
            ]
        # array[boolean]
        for where, item in items:
            if item is not None and not isinstance(item, bool):
                raise _wrong(where, "boolean", item)
        return value

    # ---- untyped values (objects without declared children)

    def untyped(self, value: Any, path: str, depth: int) -> None:
        if value is None or isinstance(value, bool):
            return
        if isinstance(value, dict):
            self.check(value, None, path, depth + 1)
        elif _is_number(value):
            self.number(value, path)
        elif isinstance(value, str):
            self.string(value, path)
        elif isinstance(value, list):
            self.untyped_list(value, path, depth)
        else:
            raise _wrong(path, "JSON", value)

    def untyped_list(self, value: list[Any], path: str, depth: int) -> None:
        first = value[0] if value else None
        if first is None:
            return  # Dify looks no further when the first element is empty
        present = [(f"{path}[{i}]", item) for i, item in enumerate(value) if item is not None]
        for kinds in ((int, float), (str,), (dict,), (list,)):
            if isinstance(first, kinds) and all(isinstance(item, kinds) for _, item in present):
                for where, item in present:
                    if isinstance(item, dict):
                        self.check(item, None, where, depth + 1)
                    elif isinstance(item, list):
                        # Dify's validator crashes on nested lists; here they are
                        # checked like objects, one level deeper.
                        self._depth(where, depth + 1)
                        self.untyped_list(item, where, depth + 1)
                    else:
                        self.untyped(item, where, depth)
                return
        raise OutputValidationError("errors.code.output.mixedArray", path=path)


def check_outputs(
    result: Mapping[str, Any], schema: Mapping[str, OutputSpec], limits: OutputLimits
) -> dict[str, Any]:
    return OutputChecker(limits).check(result, schema)
