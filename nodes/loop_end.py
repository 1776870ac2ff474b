"""Loop-end node: ends the loop it is in once the current round is over."""

from __future__ import annotations

from firstgate.nodes.base import NodeContext, NodeResult
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.selectors import Selector

TYPE = "loop-end"
SUPPORTS_RETRY = False
INLINE = True


class Data(BaseNodeData):
    pass


def selectors(data: Data) -> list[Selector]:
    return []


def output_names(data: Data) -> set[str]:
    return set()


def run(data: Data, ctx: NodeContext) -> NodeResult:
    return NodeResult(breaks=True)
