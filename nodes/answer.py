"""Answer node: renders its template. The engine streams the template's parts,
including referenced LLM text, as they become available; this is the final value."""

from __future__ import annotations

from nodes.base import NodeContext, NodeResult, render_selectors
from nodes.config import BaseNodeData
from nodes.selectors import Selector, template_selectors

TYPE = "answer"
SUPPORTS_RETRY = False


class Data(BaseNodeData):
    answer: str = ""


def selectors(data: Data) -> list[Selector]:
    return template_selectors(data.answer)


def output_names(data: Data) -> set[str]:
    return {"answer"}


def run(data: Data, ctx: NodeContext) -> NodeResult:
    return NodeResult(outputs={"answer": render_selectors(data.answer, ctx.variables)})
