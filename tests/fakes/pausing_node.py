"""Test-only nodes for the engine's pause primitive and checkpoints.

`test-pause` pauses the run (`nodes.base.Pause`) with its `payload`, asks for one
`test_pause_required` event first, and names its two handles `yes` and `no`.
`test-work` stands for real work: it appends its node id to the file `log` when
it starts (so a test counts how often each node ran, across processes), then
waits `sleep_ms`, or until the file `wait_file` exists, or (in the test's own
process) until `GATES[gate]` is set, honouring the run's cancel, and outputs
`{"output": <its id>}`; `repeatable: false` makes it unsafe to run twice. With
`tag` (a selector: a round's item, a loop variable) its log line is
`<id>:<value>` and it waits only in the round where the value is `wait_at`.
`registered()` adds them to the node registry for as long as a test needs them
(in a child process too: `register()`)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from firstgate.nodes.base import NodeContext, NodeNotice, NodeResult, Pause, Role
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.registry import NODE_TYPES
from firstgate.nodes.spec import NodeSpec

TYPE = "test-pause"
WORK = "test-work"
GATES: dict[str, threading.Event] = {}
LONGEST_WAIT_S = 60.0  # a test that forgets to open its gate still ends


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


class WorkData(BaseNodeData):
    sleep_ms: int = 0
    log: str = ""
    gate: str = ""
    wait_file: str = ""  # wait until this file exists (another process makes it)
    repeatable: bool = True  # what its NodeSpec says about running it twice
    tag: list[str] = []  # a selector whose value goes into its log line
    wait_at: str = ""  # with `tag`: wait (gate, wait_file) only when the value is this


def work(data: WorkData, ctx: NodeContext) -> NodeResult:
    line, waits = ctx.node_id, True
    if data.tag:
        value = ctx.variables.get(tuple(data.tag))
        line = f"{ctx.node_id}:{value}"
        waits = not data.wait_at or str(value) == data.wait_at
    if data.log:
        fd = os.open(data.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)
    if not waits:
        pass
    elif data.gate:
        gate = GATES.setdefault(data.gate, threading.Event())
        waited = 0.0
        while not gate.wait(0.01) and not ctx.cancel.cancelled and waited < LONGEST_WAIT_S:
            waited += 0.01
    elif data.wait_file:
        waited = 0.0
        while not os.path.exists(data.wait_file) and waited < LONGEST_WAIT_S:
            if ctx.cancel.sleep(0.01):
                break
            waited += 0.01
    elif data.sleep_ms:
        ctx.cancel.sleep(data.sleep_ms / 1000.0)
    return NodeResult(outputs={"output": ctx.node_id})


def _work_outputs(data: Any) -> set[str]:
    return {"output"}


def _repeatable(data: WorkData) -> bool:
    return data.repeatable


def _work_selectors(data: WorkData) -> list[tuple[str, ...]]:
    return [tuple(data.tag)] if data.tag else []


WORK_SPEC = NodeSpec(
    type=WORK,
    data_model=WorkData,
    run=work,
    output_names=_work_outputs,
    selectors=_work_selectors,
    repeatable=_repeatable,
)


def register() -> None:
    """Add the node to the registry (a child process of a test calls this)."""
    NODE_TYPES[TYPE] = SPEC
    NODE_TYPES[WORK] = WORK_SPEC


@contextlib.contextmanager
def registered() -> Iterator[None]:
    register()
    try:
        yield
    finally:
        NODE_TYPES.pop(TYPE, None)
        NODE_TYPES.pop(WORK, None)
