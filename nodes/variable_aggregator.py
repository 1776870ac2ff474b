"""Variable-aggregator node: the first of its variables that has a value,
typically joining the branches of an if-else where only one ran. In group mode
(`advanced_settings.group_enabled`) each group does the same and outputs
`{group_name: {"output": value}}`."""

from __future__ import annotations

from typing import Any

from firstgate.common.dsl import DslModel
from firstgate.nodes.base import NodeContext, NodeResult, VariableReader
from firstgate.nodes.config import BaseNodeData, SelectorField
from firstgate.nodes.selectors import Selector
from firstgate.nodes.spec import NodeSpec
from pydantic import Field


class Group(DslModel):
    group_name: str = Field(min_length=1)
    output_type: str = "any"
    variables: list[SelectorField] = Field(default_factory=list)


class AdvancedSettings(DslModel):
    group_enabled: bool = False
    groups: list[Group] = Field(default_factory=list)


class Data(BaseNodeData):
    output_type: str = "any"
    variables: list[SelectorField] = Field(default_factory=list)
    advanced_settings: AdvancedSettings | None = None


def _grouped(data: Data) -> bool:
    return bool(data.advanced_settings and data.advanced_settings.group_enabled)


def selectors(data: Data) -> list[Selector]:
    if _grouped(data):
        assert data.advanced_settings is not None
        return [s for g in data.advanced_settings.groups for s in g.variables]
    return list(data.variables)


def output_names(data: Data) -> set[str]:
    if _grouped(data):
        assert data.advanced_settings is not None
        return {g.group_name for g in data.advanced_settings.groups}
    return {"output"}


def _first_set(
    variables: VariableReader, candidates: list[Selector]
) -> tuple[Selector, Any] | None:
    for selector in candidates:
        value = variables.get(selector)
        if value is not None:
            return selector, value
    return None


def run(data: Data, ctx: NodeContext) -> NodeResult:
    # Dify's outputs: only what was found (a group with no value is left out),
    # and as inputs each value found, by its selector without the node id.
    outputs: dict[str, Any] = {}
    inputs: dict[str, Any] = {}
    if _grouped(data):
        assert data.advanced_settings is not None
        for group in data.advanced_settings.groups:
            found = _first_set(ctx.variables, group.variables)
            if found is not None:
                outputs[group.group_name] = {"output": found[1]}
                inputs[".".join(found[0][1:])] = found[1]
    else:
        found = _first_set(ctx.variables, data.variables)
        if found is not None:
            outputs["output"] = found[1]
            inputs[".".join(found[0][1:])] = found[1]
    return NodeResult(outputs=outputs, inputs=inputs)


SPEC = NodeSpec(
    type="variable-aggregator",
    # Dify's first name for this node; older exports still say it.
    aliases=("variable-assigner",),
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=False,
    inline=True,
)
