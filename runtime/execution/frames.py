"""What the engine keeps while a graph runs: frames, node executions, containers.

A *frame* is one run of one graph: the workflow's own graph, or one round of
a container's graph (an iteration's item, a loop's pass). It has its own
scheduler (edge states), response streamer (answers inside it), variable
scope (its nodes' outputs; see `runtime.variable_pool`) and cancel token, and
counts its executions still running: when the count of a round's frame drops
to zero, the round is over.

A *node execution* is one run of one node in one frame (all its attempts);
its id is Dify's node execution id. Everything the engine tracks while a node
runs is keyed by execution, so the same node running in ten parallel rounds
never collides with itself.

A *container execution* is a container node's run: the container's own
`ContainerRun` (which rounds, what they make), its rounds' cancel token, the
scope its rounds share (a loop's variables) and its rounds in flight (what a
checkpoint keeps of them, each a frame).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from firstgate.common.cancel import CancelToken
from firstgate.nodes.base import ContainerRun, Round, RoundDone, Rounds
from firstgate.runtime.dsl.graph import Graph, NodeDef
from firstgate.runtime.execution.events import InContainer
from firstgate.runtime.execution.response_stream import ResponseStreamer, StreamPlan
from firstgate.runtime.execution.scheduler import Scheduler
from firstgate.runtime.execution.variable_pool import VariablePool


@dataclass(eq=False, slots=True)
class Frame:
    graph: Graph
    scope: VariablePool
    scheduler: Scheduler
    streamer: ResponseStreamer | None  # None when the graph has no response node
    cancel: CancelToken
    owner: ContainerExecution | None = None  # None: the workflow's own graph
    index: int = 0  # the round, for a container's frame
    started: float = field(default_factory=time.monotonic)
    active: int = 0  # executions started in this frame and not yet finished
    error: BaseException | None = None  # the failure that ends this round
    broke: bool = False  # a node asked the loop to end after this round
    chunk_target: dict[str, str | None] = field(default_factory=dict)  # node -> its route

    @classmethod
    def open(
        cls,
        graph: Graph,
        plan: StreamPlan | None,
        scope: VariablePool,
        cancel: CancelToken,
        owner: ContainerExecution | None = None,
        index: int = 0,
    ) -> Frame:
        scheduler = Scheduler(graph)
        streamer = (
            ResponseStreamer(plan, scope, scheduler.node_state)
            if plan is not None and plan.templates
            else None
        )
        return cls(graph, scope, scheduler, streamer, cancel, owner, index)

    @property
    def place(self) -> InContainer | None:
        """Which container round this frame is (for its nodes' events)."""
        if self.owner is None:
            return None
        return InContainer(self.owner.kind, self.owner.execution.node.id, self.index)


@dataclass(eq=False, slots=True)
class Execution:
    id: str
    index: int  # 1-based order of node executions in the run (Dify's `index`)
    node: NodeDef
    frame: Frame
    predecessor: str | None
    started: float  # monotonic
    created_at: int
    attempt_started: dict[int, float] = field(default_factory=dict)
    first_token: set[tuple[int, str | None]] = field(default_factory=set)
    container: ContainerExecution | None = None  # when the node is a container
    fields: dict[str, Any] | None = None  # what its events say about it (made once)

    @classmethod
    def start(cls, node: NodeDef, frame: Frame, index: int, predecessor: str | None) -> Execution:
        return cls(
            id=new_id(),
            index=index,
            node=node,
            frame=frame,
            predecessor=predecessor,
            started=time.monotonic(),
            created_at=int(time.time()),
        )


@dataclass(eq=False, slots=True)
class ContainerExecution:
    execution: Execution
    run: ContainerRun
    kind: str
    graph: Graph  # the container's own graph
    scope: VariablePool  # shared by its rounds (its variables); each round has a child of it
    cancel: CancelToken  # its rounds' token: the frame's, or cancelled on its own to stop
    inputs: dict[str, Any]
    frames: dict[int, Frame] = field(default_factory=dict)  # rounds started, not over: by index
    rounds: int = 0  # rounds started
    stopping: bool = False
    failure: BaseException | None = None  # the container itself failed (its decision raised)
    tokens: int = 0  # used by the nodes of its rounds
    last_elapsed: float | None = None

    @property
    def running(self) -> int:
        """Its rounds started and not yet over."""
        return len(self.frames)

    @classmethod
    def open(cls, execution: Execution, run: ContainerRun, kind: str) -> ContainerExecution:
        """The container `execution` runs as `run`: its rounds' scope is a child of
        its frame's (with the container's variables), their token a child of its."""
        node, frame = execution.node, execution.frame
        types = {(node.id, name): value for name, value in run.variable_types.items()}
        return cls(
            execution=execution,
            run=run,
            kind=kind,
            graph=frame.graph.children[node.id],
            scope=frame.scope.child({node.id: run.variables}, types),
            cancel=frame.cancel.child(),
            inputs=dict(run.inputs),
        )

    def decide(self, ask: Callable[[], Rounds]) -> Sequence[Round]:
        """The rounds to start now, as the container decides (`ask()`); one that
        stops (or fails: its decision raised) cancels the rounds still running."""
        decision = Rounds()
        if self.failure is None:
            try:
                decision = ask()
            except Exception as exc:  # noqa: BLE001 - the container failed (a bad loop variable)
                self.failure = exc
        if (decision.stop or self.failure is not None) and not self.stopping:
            self.stopping = True
            self.cancel.cancel("container stopped")
        return () if self.stopping or self.cancel.cancelled else decision.start

    def open_round(self, round_: Round, plan: StreamPlan) -> Frame:
        """A round starts: its frame, held active while its first nodes start."""
        values = {self.execution.node.id: round_.values} if round_.values else None
        scope = self.scope.child(values)
        frame = Frame.open(self.graph, plan, scope, self.cancel, owner=self, index=round_.index)
        self.rounds += 1
        self.frames[round_.index] = frame
        frame.active += 1
        return frame

    def round_done(self, frame: Frame) -> RoundDone:
        """One of its rounds (`frame`) is over."""
        self.frames.pop(frame.index, None)
        elapsed = round(time.monotonic() - frame.started, 6)
        self.last_elapsed = elapsed
        return RoundDone(frame.index, frame.scope, frame.error, frame.broke, elapsed)


def new_id() -> str:
    """A node execution id, in uuid4's form (random, not secret: faster than uuid4)."""
    return str(uuid.UUID(int=random.getrandbits(128), version=4))
