"""End node: the workflow's outputs, read from selectors."""

from __future__ import annotations

from pydantic import Field

from nodes.base import NodeContext, NodeResult
from nodes.config import BaseNodeData, DslModel, SelectorField
from nodes.selectors import Selector

TYPE = "end"
SUPPORTS_RETRY = False


class OutputVariable(DslModel):
    variable: str = Field(min_length=1)
    value_selector: SelectorField


class Data(BaseNodeData):
    outputs: list[OutputVariable] = Field(default_factory=list)


def selectors(data: Data) -> list[Selector]:
    return [o.value_selector for o in data.outputs]


def output_names(data: Data) -> set[str]:
    return {o.variable for o in data.outputs}


def run(data: Data, ctx: NodeContext) -> NodeResult:
    return NodeResult(
        outputs={o.variable: ctx.variables.get(o.value_selector) for o in data.outputs}
    )
