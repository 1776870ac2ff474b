"""End node: the workflow's outputs, read from selectors. A response node: the
engine streams its outputs in declared order, one line each, while the run goes."""

from __future__ import annotations

from typing import Any

from firstgate.common.dsl import DslModel
from firstgate.nodes.base import NodeContext, NodeResult, Role
from firstgate.nodes.config import BaseNodeData, SelectorField
from firstgate.nodes.selectors import Segment, Selector, TextSegment, VariableSegment
from firstgate.nodes.spec import NodeSpec
from pydantic import Field


class OutputVariable(DslModel):
    variable: str = Field(min_length=1)
    value_selector: SelectorField
    value_type: Any = None  # newer exports declare it; the value decides


class Data(BaseNodeData):
    outputs: list[OutputVariable] = Field(default_factory=list)


def selectors(data: Data) -> list[Selector]:
    return [o.value_selector for o in data.outputs]


def output_names(data: Data) -> set[str]:
    return {o.variable for o in data.outputs}


def template(data: Data) -> list[Segment]:
    """What the end node streams: each output in declared order, one per line (Dify's rule)."""
    segments: list[Segment] = []
    for index, output in enumerate(data.outputs):
        if index:
            segments.append(TextSegment("\n"))
        segments.append(VariableSegment(output.value_selector))
    return segments


def run(data: Data, ctx: NodeContext) -> NodeResult:
    outputs = {o.variable: ctx.variables.get(o.value_selector) for o in data.outputs}
    return NodeResult(outputs=outputs, inputs=outputs)


SPEC = NodeSpec(
    type="end",
    role=Role.RESPONSE,
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=False,
    template=template,
    inline=True,
)
