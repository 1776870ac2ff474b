"""If-else node: picks the first case whose conditions hold; its `case_id` is the
edge handle to follow, `false` when none holds."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from firstgate.common.dsl import DslModel
from firstgate.nodes.base import NodeContext, NodeResult, Role, VariableReader
from firstgate.nodes.comparison import UNARY, Operator, compare, normalize_operator
from firstgate.nodes.config import BaseNodeData, SelectorField
from firstgate.nodes.selectors import Selector, template_selectors
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.values import render_text
from pydantic import BeforeValidator, Field, model_validator

ELSE_HANDLE = "false"


def _operator(value: Any) -> Any:
    return normalize_operator(value) if isinstance(value, str) else value


class Condition(DslModel):
    variable_selector: SelectorField
    comparison_operator: Annotated[Operator, BeforeValidator(_operator)]
    value: Any = None


class Case(DslModel):
    case_id: str = Field(min_length=1)
    logical_operator: Literal["and", "or"] = "and"
    conditions: list[Condition] = Field(default_factory=list)


class Data(BaseNodeData):
    cases: list[Case] = Field(default_factory=list)
    # Older exports: one implicit case with id "true".
    logical_operator: Literal["and", "or"] = "and"
    conditions: list[Condition] = Field(default_factory=list)

    @model_validator(mode="after")
    def _legacy_case(self) -> Data:
        if not self.cases and self.conditions:
            legacy = Case(
                case_id="true", logical_operator=self.logical_operator, conditions=self.conditions
            )
            object.__setattr__(self, "cases", [legacy])
        return self


def handles(data: Data) -> set[str]:
    return {c.case_id for c in data.cases} | {ELSE_HANDLE}


def selectors(data: Data) -> list[Selector]:
    return [s for case in data.cases for s in condition_selectors(case.conditions)]


def output_names(data: Data) -> set[str]:
    return {"result", "selected_case_id"}


def condition_selectors(conditions: list[Condition]) -> list[Selector]:
    """What the conditions read: their variables, and variables in their values."""
    found: list[Selector] = []
    for condition in conditions:
        found.append(condition.variable_selector)
        if isinstance(condition.value, str):
            found.extend(template_selectors(condition.value))
    return found


def _holds(condition: Condition, variables: VariableReader) -> bool:
    actual = variables.get(condition.variable_selector)
    expected = condition.value
    if condition.comparison_operator not in UNARY and isinstance(expected, str):
        # A comparison value may itself reference variables.
        expected = render_text(expected, variables)
    return compare(condition.comparison_operator, actual, expected)


def conditions_hold(
    conditions: list[Condition], logical_operator: str, variables: VariableReader
) -> bool:
    """Dify's conditions (if-else cases, a loop's break conditions); none: False."""
    if not conditions:
        return False
    results = (_holds(c, variables) for c in conditions)
    return all(results) if logical_operator == "and" else any(results)


def evaluate(case: Case, ctx: NodeContext) -> bool:
    return conditions_hold(case.conditions, case.logical_operator, ctx.variables)


def run(data: Data, ctx: NodeContext) -> NodeResult:
    for case in data.cases:
        if evaluate(case, ctx):
            return NodeResult(
                outputs={"result": True, "selected_case_id": case.case_id},
                handles=frozenset({case.case_id}),
            )
    return NodeResult(
        outputs={"result": False, "selected_case_id": ELSE_HANDLE},
        handles=frozenset({ELSE_HANDLE}),
    )


SPEC = NodeSpec(
    type="if-else",
    role=Role.BRANCH,
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=False,
    handles=handles,
    inline=True,
)
