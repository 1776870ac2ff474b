"""A test-only node that pauses the run (`nodes.base.Pause`), for the engine's
pause primitive and checkpoints: `test-pause` pauses with its `payload`, asks for
one `test_pause_required` event first, and names its two handles `yes` and `no`.
`registered()` adds it to the node registry for as long as a test needs it (in a
child process too: `register()`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from firstgate.nodes.base import NodeContext, NodeNotice, NodeResult, Pause, Role
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.registry import NODE_TYPES
from firstgate.nodes.spec import NodeSpec

TYPE = "test-pause"


class Data(BaseNodeData):
    prompt: str = ""


def run(data: Data, ctx: NodeContext) -> NodeResult:
    payload = {"prompt": data.prompt, "attempt": ctx.attempt}
    notice = NodeNotice("test_pause_required", {"node_id": ctx.node_id, "prompt": data.prompt})
    return NodeResult(
        pause=Pause(
            node_id=ctx.node_id,
            payload=payload,
            reason={"TYPE": "test_pause", "node_id": ctx.node_id},
            events=(notice,),
        )
    )


def _handles(data: Any) -> set[str]:
    return {"yes", "no"}


def _outputs(data: Any) -> set[str]:
    return {"answer"}


SPEC = NodeSpec(
    type=TYPE,
    role=Role.BRANCH,
    data_model=Data,
    run=run,
    handles=_handles,
    output_names=_outputs,
)


def register() -> None:
    """Add the node to the registry (a child process of a test calls this)."""
    NODE_TYPES[TYPE] = SPEC


@contextlib.contextmanager
def registered() -> Iterator[None]:
    register()
    try:
        yield
    finally:
        NODE_TYPES.pop(TYPE, None)
