"""Answer node: a chatflow's reply. A response node: the engine streams its
template's parts, LLM text included, as they become available; `run` gives the
whole text, which is what the node outputs."""

from __future__ import annotations

from typing import Any

from firstgate.nodes.base import NodeContext, NodeResult, Role
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.selectors import Segment, Selector, parse_template, template_selectors
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.values import render_markdown


class Data(BaseNodeData):
    answer: str = ""
    variables: Any = None  # older exports list them; the template is what counts


def selectors(data: Data) -> list[Selector]:
    return template_selectors(data.answer)


def output_names(data: Data) -> set[str]:
    return {"answer"}


def template(data: Data) -> list[Segment]:
    return parse_template(data.answer)


def run(data: Data, ctx: NodeContext) -> NodeResult:
    return NodeResult(outputs={"answer": render_markdown(data.answer, ctx.variables)})


SPEC = NodeSpec(
    type="answer",
    role=Role.RESPONSE,
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=False,
    template=template,
    inline=True,
)
