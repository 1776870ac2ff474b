"""Loop-end node: ends the loop it is in once the current round is over."""

from __future__ import annotations

from firstgate.nodes.base import NodeContext, NodeResult
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.spec import NodeSpec


class Data(BaseNodeData):
    pass


def run(data: Data, ctx: NodeContext) -> NodeResult:
    return NodeResult(breaks=True)


# Reads nothing and has no outputs (the defaults).
SPEC = NodeSpec(type="loop-end", data_model=Data, run=run, inline=True)
