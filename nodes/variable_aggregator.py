"""Variable-aggregator node: the first of its variables that has a value,
typically joining the branches of an if-else where only one ran."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from nodes.base import NodeContext, NodeResult, VariableReader
from nodes.config import BaseNodeData, DslModel, SelectorField
from nodes.selectors import Selector

TYPE = "variable-aggregator"
# Dify's first name for this node; older exports still say it.
ALIASES = ("variable-assigner",)
SUPPORTS_RETRY = False
INLINE = True


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


def _first_set(variables: VariableReader, candidates: list[Selector]) -> Any:
    for selector in candidates:
        value = variables.get(selector)
        if value is not None:
            return value
    return None


def run(data: Data, ctx: NodeContext) -> NodeResult:
    if _grouped(data):
        assert data.advanced_settings is not None
        return NodeResult(
            outputs={
                g.group_name: {"output": _first_set(ctx.variables, g.variables)}
                for g in data.advanced_settings.groups
            }
        )
    return NodeResult(outputs={"output": _first_set(ctx.variables, data.variables)})
