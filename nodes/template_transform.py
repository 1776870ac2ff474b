"""Template-transform node: renders a Jinja2 template in a sandbox."""

from __future__ import annotations

from firstgate.common.dsl import DslModel
from firstgate.nodes.base import NodeContext, NodeResult
from firstgate.nodes.config import BaseNodeData, SelectorField
from firstgate.nodes.selectors import Selector
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.templates.jinja import JinjaSource, render_jinja
from pydantic import Field


class TemplateVariable(DslModel):
    variable: str = Field(min_length=1)
    value_selector: SelectorField


class Data(BaseNodeData):
    template: JinjaSource = ""
    variables: list[TemplateVariable] = Field(default_factory=list)


def selectors(data: Data) -> list[Selector]:
    return [v.value_selector for v in data.variables]


def output_names(data: Data) -> set[str]:
    return {"output"}


def run(data: Data, ctx: NodeContext) -> NodeResult:
    values = {v.variable: ctx.variables.get(v.value_selector) for v in data.variables}
    text = render_jinja(
        data.template,
        values,
        executor=ctx.code_executor,
        cancel=ctx.cancel,
        on_dispatcher=ctx.on_dispatcher,
    )
    return NodeResult(outputs={"output": text})


SPEC = NodeSpec(
    type="template-transform",
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=False,
    inline=True,  # a template for the sandbox moves to a worker (NeedsWorker)
)
