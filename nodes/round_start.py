"""Where a container's round starts (`iteration-start`, `loop-start`): the
editor draws one inside every iteration and loop. It runs no code and reports
no events (Dify reports none either); the round's first nodes follow it."""

from __future__ import annotations

from firstgate.nodes.base import NodeContext, NodeResult, Role
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.selectors import Selector

TYPE = "iteration-start"
ALIASES = ("loop-start",)
ROLE = Role.ROUND_START
SUPPORTS_RETRY = False


class Data(BaseNodeData):
    pass


def selectors(data: Data) -> list[Selector]:
    return []


def output_names(data: Data) -> set[str]:
    return set()


def run(data: Data, ctx: NodeContext) -> NodeResult:
    return NodeResult()  # never called: the engine takes its edges
