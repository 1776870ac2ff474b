"""Where a container's round starts (`iteration-start`, `loop-start`): the
editor draws one inside every iteration and loop. It runs no code and reports
no events (Dify reports none either); the round's first nodes follow it."""

from __future__ import annotations

from firstgate.nodes.base import Role
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.spec import NodeSpec


class Data(BaseNodeData):
    pass


# Reads nothing, writes nothing, never runs: the engine takes its edges.
SPEC = NodeSpec(
    type="iteration-start",
    aliases=("loop-start",),
    role=Role.ROUND_START,
    data_model=Data,
)
