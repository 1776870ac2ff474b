"""A code node's result checked as Dify checks it (nodes/code/outputs.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from firstgate.nodes.code import CodeOutput
from firstgate.nodes.code.outputs import (
    CodeNodeError,
    DepthLimitError,
    OutputValidationError,
    check_outputs,
)
from firstgate.sandbox.executor import OutputLimits

SMALL = OutputLimits(
    max_string_length=10,
    max_number=100,
    min_number=-100,
    max_precision=4,
    max_depth=3,
    max_string_array_length=3,
    max_object_array_length=2,
    max_number_array_length=4,
)


def schema(**outputs: Any) -> dict[str, CodeOutput]:
    return {name: CodeOutput.model_validate(spec) for name, spec in outputs.items()}


def check(result: dict[str, Any], limits: OutputLimits = SMALL, **outputs: Any) -> dict[str, Any]:
    return check_outputs(result, schema(**outputs), limits)


def fails(
    key: str, result: dict[str, Any], error: type[Exception] = OutputValidationError, **outputs: Any
) -> dict[str, Any]:
    with pytest.raises(error) as caught:
        check(result, **outputs)
    assert caught.value.message_key == key  # type: ignore[attr-defined]
    return caught.value.params  # type: ignore[attr-defined]


def test_defaults_are_difys() -> None:
    limits = OutputLimits()
    assert (limits.max_string_length, limits.max_depth, limits.max_precision) == (400_000, 5, 20)
    assert (limits.max_number, limits.min_number) == (2**63 - 1, -(2**63 - 1))
    assert (
        limits.max_string_array_length,
        limits.max_object_array_length,
        limits.max_number_array_length,
    ) == (30, 30, 1000)


def test_every_type_passes_when_right() -> None:
    result = {
        "s": "text",
        "n": 3.5,
        "b": True,
        "o": {"k": [1, "x"]},
        "as": ["a", None],
        "an": [1, 2.5],
        "ao": [{"x": 1}, None],
        "ab": [True, None],
    }
    outputs = {
        "s": {"type": "string"},
        "n": {"type": "number"},
        "b": {"type": "boolean"},
        "o": {"type": "object", "children": None},
        "as": {"type": "array[string]"},
        "an": {"type": "array[number]"},
        "ao": {"type": "array[object]"},
        "ab": {"type": "array[boolean]"},
    }
    with pytest.raises(OutputValidationError):  # untyped list mixing numbers and strings
        check(result, **outputs)
    result["o"] = {"k": [1, 2]}
    assert check(result, **outputs) == result


def test_missing_output_names_its_path() -> None:
    params = fails(
        "errors.code.output.missing",
        {"root": {}},
        root={"type": "object", "children": {"child": {"type": "string"}}},
    )
    assert params["path"] == "root.child"


def test_undeclared_output_is_refused() -> None:
    params = fails(
        "errors.code.output.undeclared", {"a": "x", "zz": 1}, CodeNodeError, a={"type": "string"}
    )
    assert params["names"] == "zz"


def test_wrong_types() -> None:
    assert fails("errors.code.output.type", {"r": 3}, r={"type": "string"})["expected"] == "string"
    assert fails("errors.code.output.type", {"r": "3"}, r={"type": "number"})["got"] == "string"
    assert fails("errors.code.output.type", {"r": [1]}, r={"type": "object"})["got"] == "array"
    params = fails("errors.code.output.type", {"r": ["ok", 1]}, r={"type": "array[string]"})
    assert params["path"] == "r[1]"
    assert (
        fails("errors.code.output.type", {"r": [1, None]}, r={"type": "array[number]"})["path"]
        == "r[1]"
    )
    assert (
        fails("errors.code.output.type", {"r": [{}, 1]}, r={"type": "array[object]"})["path"]
        == "r[1]"
    )
    assert (
        fails("errors.code.output.type", {"r": [True, 1]}, r={"type": "array[boolean]"})["path"]
        == "r[1]"
    )


def test_nulls_stand_in_for_values_as_in_dify() -> None:
    outputs = {
        k: {"type": t}
        for k, t in [("s", "string"), ("n", "number"), ("o", "object"), ("a", "array[string]")]
    }
    assert check({"s": None, "n": None, "o": None, "a": None}, **outputs) == {
        "s": None,
        "n": None,
        "o": None,
        "a": None,
    }


def test_boolean_is_not_checked_and_numbers_take_booleans_as_in_dify() -> None:
    assert check({"b": "yes"}, b={"type": "boolean"}) == {"b": "yes"}
    assert check(
        {"n": True, "a": [False, 2]}, n={"type": "number"}, a={"type": "array[number]"}
    ) == {"n": 1, "a": [0, 2]}


def test_string_length_and_nul_bytes() -> None:
    assert check({"s": "a\x00b"}, s={"type": "string"}) == {"s": "ab"}
    params = fails("errors.code.output.stringLength", {"s": "x" * 11}, s={"type": "string"})
    assert params == {"path": "s", "limit": 10}
    assert (
        fails("errors.code.output.stringLength", {"a": ["x" * 11]}, a={"type": "array[string]"})[
            "path"
        ]
        == "a[0]"
    )


def test_number_range_precision_and_non_finite() -> None:
    assert fails("errors.code.output.numberRange", {"n": 101}, n={"type": "number"})["max"] == 100
    assert fails("errors.code.output.numberRange", {"n": -101}, n={"type": "number"})["min"] == -100
    assert fails("errors.code.output.numberRange", {"n": float("nan")}, n={"type": "number"})
    assert fails("errors.code.output.numberRange", {"n": float("inf")}, n={"type": "number"})
    assert check({"n": 1.2345}, n={"type": "number"}) == {"n": 1.2345}
    assert fails("errors.code.output.precision", {"n": 1.23456}, n={"type": "number"})["limit"] == 4


def test_array_lengths_per_type() -> None:
    assert check({"a": ["1", "2", "3"]}, a={"type": "array[string]"})
    assert (
        fails("errors.code.output.arrayLength", {"a": ["1"] * 4}, a={"type": "array[string]"})[
            "limit"
        ]
        == 3
    )
    assert (
        fails("errors.code.output.arrayLength", {"a": [1] * 5}, a={"type": "array[number]"})[
            "limit"
        ]
        == 4
    )
    assert (
        fails("errors.code.output.arrayLength", {"a": [{}] * 3}, a={"type": "array[object]"})[
            "limit"
        ]
        == 2
    )
    assert check({"a": [True] * 50}, a={"type": "array[boolean]"})  # no limit in Dify


def test_depth_limit_counts_nested_objects() -> None:
    ok = {"a": {"b": {"c": 1}}}
    assert check(ok, a={"type": "object"})
    params = fails(
        "errors.code.output.depth",
        {"a": {"b": {"c": {"d": 1}}}},
        DepthLimitError,
        a={"type": "object"},
    )
    assert params["limit"] == 3


def test_declared_children_are_checked_by_type() -> None:
    outputs = {
        "o": {
            "type": "object",
            "children": {"n": {"type": "number"}, "l": {"type": "array[string]"}},
        }
    }
    assert check({"o": {"n": 1, "l": ["x"]}}, **outputs) == {"o": {"n": 1, "l": ["x"]}}
    assert fails("errors.code.output.type", {"o": {"n": "1", "l": []}}, **outputs)["path"] == "o.n"
    items = {"rows": {"type": "array[object]", "children": {"id": {"type": "number"}}}}
    assert (
        fails("errors.code.output.missing", {"rows": [{"id": 1}, {}]}, **items)["path"]
        == "rows[1].id"
    )


def test_untyped_values_are_checked_recursively() -> None:
    assert (
        fails("errors.code.output.stringLength", {"o": {"k": "x" * 11}}, o={"type": "object"})[
            "path"
        ]
        == "o.k"
    )
    assert (
        fails("errors.code.output.numberRange", {"o": {"k": [1, 500]}}, o={"type": "object"})[
            "path"
        ]
        == "o.k[1]"
    )
    assert (
        fails("errors.code.output.mixedArray", {"o": {"k": [1, "x"]}}, o={"type": "object"})["path"]
        == "o.k"
    )
    # Nested lists (which crash Dify's validator) are checked one level deeper.
    assert check({"o": {"m": [[1, 2], [3]]}}, o={"type": "object"})
    assert fails("errors.code.output.numberRange", {"o": {"m": [[1, 200]]}}, o={"type": "object"})


@dataclass
class _Spec:
    type: str
    children: Any = None


def test_output_spec_is_a_protocol() -> None:
    assert check_outputs({"x": "y"}, {"x": _Spec("string")}, SMALL) == {"x": "y"}
