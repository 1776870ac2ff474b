"""If-else: Dify's comparison operators, and/or, multiple cases, handles."""

from __future__ import annotations

from typing import Any

import pytest
from firstgate.common.cancel import CancelToken
from firstgate.common.problems import problems_from_validation
from firstgate.nodes import if_else
from firstgate.nodes.base import NodeContext
from firstgate.nodes.comparison import compare
from pydantic import ValidationError


class Vars:
    def __init__(self, values: dict[tuple[str, ...], Any]) -> None:
        self.values = values

    def get(self, selector: tuple[str, ...]) -> Any:
        return self.values.get(tuple(selector))


@pytest.mark.parametrize(
    ("op", "actual", "expected", "result"),
    [
        ("contains", "hello world", "lo w", True),
        ("contains", ["a", "b"], "b", True),
        ("contains", None, "x", False),
        ("not contains", "hello", "z", True),
        ("not contains", ["a"], "a", False),
        ("start with", "hello", "he", True),
        ("start with", "hello", "lo", False),
        ("end with", "hello", "lo", True),
        ("is", "x", "x", True),
        ("is", "x", "X", False),
        ("is not", "x", "y", True),
        ("is", True, "true", True),
        ("is", False, "true", False),
        ("is not", True, "false", True),
        ("empty", "", None, True),
        ("empty", [], None, True),
        ("empty", None, None, True),
        ("empty", "a", None, False),
        ("not empty", ["a"], None, True),
        ("=", 3, "3", True),
        ("=", "3.0", 3, True),
        ("≠", 3, "4", True),
        (">", 5, "4.5", True),
        (">", "abc", "1", False),
        ("<", 1, 2, True),
        ("≥", 2, 2, True),
        ("≤", 3, 2, False),
        (">=", 2, 2, True),
        ("in", "b", ["a", "b"], True),
        ("in", "c", "a, b", False),
        ("not in", "c", ["a", "b"], True),
        ("all of", ["a", "b", "c"], ["a", "c"], True),
        ("all of", ["a"], ["a", "c"], False),
        ("null", None, None, True),
        ("not null", 0, None, True),
        ("exists", "x", None, True),
        ("not exists", None, None, True),
    ],
)
def test_operators(op: str, actual: Any, expected: Any, result: bool) -> None:
    assert compare(op, actual, expected) is result


def run(data: dict[str, Any], values: dict[tuple[str, ...], Any]) -> Any:
    node = if_else.Data.model_validate({"type": "if-else", "title": "B", **data})
    ctx = NodeContext(node_id="b", attempt=1, variables=Vars(values), cancel=CancelToken())
    return if_else.run(node, ctx)


def cond(var: str, op: str, value: Any = None) -> dict[str, Any]:
    return {"variable_selector": ["s", var], "comparison_operator": op, "value": value}


CASES = {
    "cases": [
        {
            "case_id": "both",
            "logical_operator": "and",
            "conditions": [cond("a", "=", 1), cond("b", "is", "x")],
        },
        {
            "case_id": "either",
            "logical_operator": "or",
            "conditions": [cond("a", ">", 5), cond("b", "contains", "y")],
        },
    ]
}


@pytest.mark.parametrize(
    ("a", "b", "handle"),
    [(1, "x", "both"), (1, "y", "either"), (9, "z", "either"), (2, "x", "false")],
)
def test_cases_in_order_with_and_or(a: int, b: str, handle: str) -> None:
    result = run(CASES, {("s", "a"): a, ("s", "b"): b})
    assert result.handles == frozenset({handle})
    assert result.outputs == {"result": handle != "false", "selected_case_id": handle}


def test_legacy_single_case_uses_the_true_handle() -> None:
    legacy = {"logical_operator": "and", "conditions": [cond("a", "not empty")]}
    assert run(legacy, {("s", "a"): "v"}).handles == frozenset({"true"})
    assert run(legacy, {}).handles == frozenset({"false"})
    node = if_else.Data.model_validate({"type": "if-else", **legacy})
    assert if_else.handles(node) == {"true", "false"}


def test_comparison_value_may_reference_a_variable() -> None:
    data = {"cases": [{"case_id": "same", "conditions": [cond("a", "is", "{{#s.b#}}")]}]}
    assert run(data, {("s", "a"): "q", ("s", "b"): "q"}).handles == frozenset({"same"})
    assert ("s", "b") in if_else.selectors(if_else.Data.model_validate({"type": "if-else", **data}))


def test_unknown_operator_is_a_dsl_error() -> None:
    with pytest.raises(ValidationError) as caught:
        if_else.Data.model_validate(
            {"type": "if-else", "cases": [{"case_id": "c", "conditions": [cond("a", "like")]}]}
        )
    (problem,) = problems_from_validation(caught.value)
    assert problem.message_key == "dsl.choice"
    assert problem.field == "cases[0].conditions[0].comparison_operator"
    assert "must be one of contains, not contains, start with" in problem.render()
    assert problem.render().endswith('got "like"')
