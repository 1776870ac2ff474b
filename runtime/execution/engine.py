"""One workflow run: the dispatcher.

The dispatcher runs in whichever thread (or greenlet) iterates the run. It
starts ready nodes, receives their chunks, notices and outcomes through one
queue, updates the variable pool and the schedulers, streams the response
nodes, and decides how the run ends. A node that only computes (it declares
`inline=True` in its `NodeSpec`: start, end, answer, template, if-else, aggregator, assigner, list
operator) runs on the dispatcher itself, with no thread hand-off; every other
node runs on the worker pool. Abort, failure and the time limit all stop the
run through `_stop`: cancel the token (which shuts in-flight LLM sockets down
through their gates), wake the dispatcher, drain, report. The time limit is a
deadline, not a timer: the dispatcher's wait for the next event ends at it, and
it is checked between the nodes the dispatcher runs itself.

Containers (iteration, loop) run their rounds on the same machinery: each
round is a frame (`runtime/execution/frames.py`) with its own scheduler, streamer and
variable scope, under the container's cancel token (a child of the run's),
counted in the run's steps. The container node itself is not code on a
worker: its `ContainerRun` says which rounds to start and, when they have
ended, what the container outputs; the dispatcher asks it between rounds.

Order, as Dify's graph engine emits it: when a node finishes, its outputs go
into the pool and its edges are resolved first, then the text this lets
through streams, then the node's `node_finished`, then the nodes it made
ready start. A chatflow's turn ends with `workflow_finished` followed by
`message_end` (or `error`). The run is recorded in the store just before
`workflow_finished`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from firstgate.common.cancel import CancelToken
from firstgate.nodes.base import (
    NeedsWorker,
    Pause,
    Role,
    Round,
    Rounds,
)
from firstgate.runtime.dsl.graph import Graph, NodeDef
from firstgate.runtime.execution import checkpoint as cp
from firstgate.runtime.execution import events as ev
from firstgate.runtime.execution.error_handler import (
    Outcome,
    Status,
    apply_strategy,
    succeeded,
)
from firstgate.runtime.execution.frames import ContainerExecution, Execution, Frame
from firstgate.runtime.execution.inbox import Chunk, Done, Inbox, NodeShared, Notice, Stop
from firstgate.runtime.execution.limits import (
    Deadline,
    LimitExceededError,
    RunLimits,
    steps_exceeded,
    time_exceeded,
)
from firstgate.runtime.execution.resources import RunResources
from firstgate.runtime.execution.response_stream import Piece, StreamPlan
from firstgate.runtime.execution.run_report import RunReport
from firstgate.runtime.execution.session import RunSession, RunSummary, storable
from firstgate.runtime.execution.variable_pool import VariablePool
from firstgate.runtime.execution.worker_pool import WorkerPool
from firstgate.store.base import NodeExecutionRecord

# How long a stopped run waits for its in-flight nodes to notice the cancel.
DRAIN_GRACE_S = 5.0


class WorkflowRun:
    """Iterate for events; `abort()` from any thread or greenlet stops the run promptly."""

    def __init__(
        self,
        graph: Graph,
        inputs: dict[str, Any],
        *,
        session: RunSession,
        resources: RunResources,
        providers: set[str],
        limits: RunLimits,
        max_workers: int,
        warm_code_executor: bool = False,
        owned: contextlib.ExitStack | None = None,
        graph_hash: str = "",
        checkpointer: cp.Checkpointer | None = None,
        durability: cp.Durability = cp.Durability.END,
        batch_ms: int = cp.DEFAULT_BATCH_MS,
        resume: Resume | None = None,
    ) -> None:
        """`resources` are shared and never closed here; `owned` is what the run
        closes when it ends (its session, resources opened for it alone).
        `checkpointer` writes the run's checkpoints (`durability` says when);
        `resume` is the checkpoint the run goes on from."""
        self.graph = graph
        self.resources = resources
        self.providers = providers  # of the LLM nodes the run can reach
        self.inputs = inputs
        self.session = session
        self.info = session.info
        self.run_id = session.info.workflow_run_id
        self.limits = limits
        self._owned = owned or contextlib.ExitStack()
        # Built on first use: a missing sandbox key refuses the run here.
        code_executor = resources.code_executor
        self._warm_code_executor = warm_code_executor
        self.connectors = resources.connectors()  # the run's own: it closes them
        self.cancel = CancelToken()
        pool = VariablePool(
            session.system,
            session.environment,
            session.conversation,
            session.conversation_types,
            start_id=self.graph.start_id,
        )
        self._plans: dict[int, StreamPlan] = {}  # graph -> how it streams (once per graph)
        self._top = Frame.open(graph, self._plan(graph), pool, self.cancel)
        self.report = RunReport.of(session, inputs)
        shared = NodeShared(
            resources.clients, inputs, code_executor, self.connectors, session.history
        )
        self._inbox = Inbox(self.report, shared)
        self._workers = WorkerPool(max_workers)
        self._in_flight: dict[str, Execution] = {}  # execution id -> execution
        # Of those, containers: when nothing else is in flight, their rounds wait
        # on paused nodes (the run pauses).
        self._holding = 0
        self._inline: deque[Execution] = deque()  # started, to run on the dispatcher
        # Rounds and containers whose last execution ended, to conclude next
        # (queued, not nested: a thousand short rounds must not nest a thousand calls).
        self._later: deque[Callable[[], Iterator[ev.Event]]] = deque()
        self._failure: tuple[NodeDef, BaseException] | None = None
        self._stop_message: Stop | None = None
        self._stop_lock = threading.Lock()
        self._deadline = Deadline(None)  # set when the run starts
        # Checkpoints: where the run's state goes, when, and what it goes on from.
        self.graph_hash = graph_hash
        self._checkpointer = checkpointer
        self._durability = durability if checkpointer is not None else cp.Durability.END
        self._batch_s = max(0, batch_ms) / 1000.0
        self._last_save = 0.0
        self._saved_records = 0  # of the report's node records, those in the store
        # Finished top-graph nodes whose outputs are not in the store yet.
        self._unwritten: list[str] = []
        self._run_state: dict[str, Any] | None = None  # what every snapshot of the run repeats
        # The top scope's changing variables as the last head had them, and their writes.
        self._changing: tuple[tuple[int, ...], dict[str, dict[str, Any]]] | None = None
        self._row_at: float | None = None  # when the run's row was last written
        self._row_behind = False  # a checkpoint went without the run's row
        self._resume = resume
        self._paused: list[tuple[Execution, Pause]] = []
        self.checkpoint: cp.Snapshot | None = None  # the latest one taken
        self.position = resume.snapshot.position if resume is not None else 0
        self._events = self._run()

    # ---- public surface

    def __iter__(self) -> Iterator[ev.Event]:
        return self

    def __next__(self) -> ev.Event:
        event = next(self._events)
        self.position += 1  # the run's event position: a resumed run's goes on
        return event

    @property
    def status(self) -> str | None:
        return self.report.status

    @property
    def outputs(self) -> dict[str, Any]:
        return self.report.outputs

    def abort(self, reason: str = "workflow aborted") -> None:
        self._stop(Stop(aborted=True, reason=reason))

    def close(self) -> None:
        """Stop and release everything if the caller stops iterating early."""
        self._events.close()

    # ---- stopping

    def _stop(self, message: Stop) -> None:
        # Record why *before* cancelling: cancel() shuts in-flight streams down at
        # once, and a node that sees it can report back before this thread runs
        # on; the dispatcher must never take that node's end for a finished run.
        with self._stop_lock:
            if self._stop_message is not None or self.cancel.cancelled:
                return
            self._stop_message = message
        self.cancel.cancel(message.reason)  # shuts in-flight streams down via their gates
        self._inbox.put(message)  # wakes the dispatcher

    def _time_limit(self) -> None:
        assert self.limits.max_run_seconds is not None
        error = time_exceeded(self.limits.max_run_seconds)
        self._stop(Stop(aborted=False, reason=str(error), error=error))

    def _next(self) -> object | None:
        """What nodes sent next, waiting no longer than the run has left."""
        item = self._inbox.get(self._deadline.remaining())
        if item is None:
            self._time_limit()
        return item

    @property
    def _going(self) -> bool:
        return self._stop_message is None and self._failure is None

    # ---- the dispatcher

    def _plan(self, graph: Graph) -> StreamPlan:
        plan = self._plans.get(id(graph))
        if plan is None:
            plan = self._plans[id(graph)] = StreamPlan(graph)
        return plan

    def _run(self) -> Iterator[ev.Event]:
        try:
            yield self.report.started() if self._resume is None else self.report.resumed()
            self._deadline = Deadline.after(self.limits.max_run_seconds)
            self._last_save = time.monotonic()  # a batch's clock starts with the run
            try:
                # Started here, in the caller's thread, so the server dies with its owner.
                self.resources.start_local(self.providers)
            except Exception as exc:  # noqa: BLE001 - reported as the run's failure
                yield from self.report.ended(self.report.failed(exc), self._record_end)
                return
            if self._warm_code_executor:
                self.resources.warm_up_code_executor()
            if self._resume is None:
                yield from self._launch(self._top, [self.graph.start_id], None)
            else:
                yield from self._restart(self._resume)
            yield from self._pump()
            while len(self._in_flight) > self._holding and self._going:
                if self._row_behind and self._inbox.empty():
                    self._write(row=True)  # about to wait: the run's progress shows first
                item = self._next()
                if isinstance(item, Done):
                    yield from self._finish(item.execution, item.outcome)
                else:
                    yield from self._relay(item)
                yield from self._pump()
            if self._going and self._paused:
                yield from self._pause_run()
                return
            if self._going:
                yield from self.report.ended(self.report.succeeded(), self._record_end)
                return
            yield from self._drain()
            yield from self.report.ended(self._stopped(), self._record_end)
        finally:
            self.cancel.cancel("run finished")
            self._workers.shutdown(timeout=1.0)
            self.connectors.close()
            self._owned.close()

    # ---- starting node executions

    def _launch(
        self, frame: Frame, node_ids: list[str], predecessor: str | None
    ) -> Iterator[ev.Event]:
        """Start nodes that became ready in `frame`: their `node_started` first,
        in order, then each runs (inline ones later, in `_pump`)."""
        for node_id in node_ids:
            if frame.cancel.cancelled:
                return
            node = frame.graph.nodes[node_id]
            if node.spec.role is Role.ROUND_START:
                yield from self._round_start(frame, node)
                continue
            index = self.report.next_index()
            if index > self.limits.max_steps:
                error = steps_exceeded(self.limits.max_steps)
                self._stop(Stop(aborted=False, reason=str(error), error=error))
                return
            execution = Execution.start(node, frame, index, predecessor)
            frame.scheduler.mark_running(node_id)
            frame.active += 1
            self._in_flight[execution.id] = execution
            if node.spec.container is not None:
                yield from self._start_container(execution)
                continue
            yield self.report.node_started(execution)
            if self._unsafe_start(execution):
                return
            if node.spec.inline and node.retries == 0:
                self._inline.append(execution)
            else:
                self._submit(execution)

    def _unsafe_start(self, execution: Execution) -> bool:
        """A node unsafe to repeat (in any frame: a container's rounds are resumed,
        not run again) starts only once the store knows it is in flight (so a
        resumed run fails it rather than run it again); True when that could
        not be written (the run is failing)."""
        node = execution.node
        if self._durability is cp.Durability.END or node.spec.repeatable(node.data):
            return False
        if self._write():
            return False
        self._in_flight.pop(execution.id, None)
        execution.frame.active -= 1
        return True

    def _round_start(self, frame: Frame, node: NodeDef) -> Iterator[ev.Event]:
        """A round's start node runs nothing and reports nothing: its edges are taken."""
        step = frame.scheduler.complete(node.id, None)
        if frame.streamer is not None:
            yield from self._pieces(frame, frame.streamer.on_node_done(node.id, step.taken, ()))
        yield from self._launch(frame, step.ready, node.id)

    def _pump(self) -> Iterator[ev.Event]:
        """Run the started inline nodes on this thread, and what they make ready;
        conclude ended rounds and containers first."""
        while (self._later or self._inline) and self._going:
            if self._deadline.passed():  # a long chain of inline nodes never waits
                self._time_limit()
                return
            if self._later:
                yield from self._later.popleft()()
                continue
            execution = self._inline.popleft()
            if execution.frame.cancel.cancelled:
                yield from self._finish(execution, Outcome(Status.CANCELLED, 1))
                continue
            try:
                outcome = self._inbox.attempts(execution, on_dispatcher=True)
            except NeedsWorker:
                self._submit(execution)  # this run needs more than a moment
                continue
            yield from self._finish(execution, outcome)

    def _submit(self, execution: Execution) -> None:
        inbox = self._inbox
        self._workers.submit(lambda: inbox.put(Done(execution, inbox.attempts(execution))))

    # ---- what running nodes report

    def _relay(self, item: object) -> Iterator[ev.Event]:
        if not isinstance(item, Chunk | Notice):
            return  # a stop message: the loop ends on its own
        frame = item.execution.frame
        if frame.cancel.cancelled:
            return  # what a stopped run's (or stopped container's) nodes still send is noise
        if isinstance(item, Chunk):
            yield from self._on_chunk(item)
            return
        event = item.event
        retried = isinstance(event, ev.NodeRetry) or (
            isinstance(event, ev.NodeFallback) and event.kind == "swap"
        )
        if retried:  # what the attempt streamed and redaction held back goes out first
            yield from self.report.flush_text(item.execution.node.id)
        yield event
        if retried:
            # Text of the failed attempt (or failed fallback target) not yet
            # shown never will be: the next one replaces it.
            if frame.streamer is not None:
                frame.streamer.on_retry(item.execution.node.id)

    def _on_chunk(self, chunk: Chunk) -> Iterator[ev.Event]:
        execution = chunk.execution
        frame = execution.frame
        frame.chunk_target[execution.node.id] = chunk.target
        key = (chunk.attempt, chunk.target)
        if key not in execution.first_token:
            execution.first_token.add(key)
            yield self.report.first_token(execution, chunk.attempt, chunk.target)
        if frame.streamer is not None:
            pieces = frame.streamer.on_chunk(execution.node.id, chunk.attempt, chunk.text)
            yield from self._pieces(frame, pieces)

    def _pieces(self, frame: Frame, pieces: list[Piece]) -> Iterator[ev.Event]:
        for piece in pieces:
            yield from self.report.text(frame, piece)

    # ---- a node execution ends

    def _finish(self, execution: Execution, outcome: Outcome) -> Iterator[ev.Event]:
        """Dify's order: outputs into the pool, edges resolved, the text that lets
        through, the node's end event, then what it made ready starts."""
        node, frame = execution.node, execution.frame
        if self._in_flight.pop(execution.id, None) is not None and execution.container is not None:
            self._holding -= 1
        if outcome.status is Status.PAUSED:
            assert outcome.pause is not None
            if not _in_parallel_round(frame):
                # Nothing more of it runs now; the run pauses once nothing else does.
                self._paused.append((execution, outcome.pause))
                if frame.owner is None:
                    self._left(frame)  # a round stays open while its node is paused
                return
            error = cp.CheckpointError("errors.checkpoint.pauseInContainer", node=node.id)
            outcome = self._failed(execution, error)
        if outcome.status not in (Status.SUCCEEDED, Status.EXCEPTION):
            yield self.report.node_ended(execution, outcome)
            if outcome.status is Status.FAILED:
                error = outcome.error or RuntimeError("node failed")
                if frame.owner is None:
                    if self._failure is None:
                        self._failure = (node, error)
                        self.cancel.cancel(f"node {node.id} failed")
                elif frame.error is None:
                    frame.error = error  # the round fails; nothing after this node runs
            self._left(frame)
            return
        frame.scope.set_outputs(node.id, outcome.outputs)
        if outcome.status is Status.SUCCEEDED:
            for selector, value in outcome.updates.items():
                frame.scope.set(selector, value)
                if selector[0] == "conversation":
                    self.report.wrote(selector[1], value)
            frame.broke = frame.broke or outcome.breaks
        step = frame.scheduler.complete(node.id, outcome.handles)
        # Dify reports a container's end before the text it lets through, and
        # any other node's end after that text.
        container_end = node.spec.container is not None
        if container_end:
            yield self.report.node_ended(execution, outcome)
        if frame.streamer is not None:
            pieces = frame.streamer.on_node_done(node.id, step.taken, step.skipped)
            yield from self._pieces(frame, pieces)
        yield from self.report.flush_text(node.id)
        if not container_end:
            yield self.report.node_ended(execution, outcome)
        if node.spec.role is Role.RESPONSE and outcome.status is Status.SUCCEEDED:
            self.report.merge_response(outcome.outputs)
        if frame.owner is None and self._checkpointer is not None:
            self._unwritten.append(node.id)
            if self._durability is not cp.Durability.END:
                self._boundary(step.ready if frame.error is None else [], node.id)
        if step.ready and frame.error is None:
            yield from self._launch(frame, step.ready, node.id)
        self._left(frame)

    def _left(self, frame: Frame) -> None:
        """One execution of `frame` is over: the round ends with its last one."""
        frame.active -= 1
        if frame.active == 0 and frame.owner is not None:
            self._later.append(lambda: self._round_done(frame))

    # ---- containers: their rounds run as frames on this dispatcher

    def _start_container(self, execution: Execution) -> Iterator[ev.Event]:
        node, spec = execution.node, execution.node.spec.container
        assert spec is not None
        try:
            run = spec.start(node.data, self._inbox.context(execution, 1, on_dispatcher=True))
        except Exception as exc:  # noqa: BLE001 - its inputs were wrong: the node failed
            yield self.report.container_started(execution, spec.kind, None)
            yield from self._finish(execution, self._failed(execution, exc))
            return
        container = execution.container = ContainerExecution.open(execution, run, spec.kind)
        self._holding += 1
        yield self.report.container_started(execution, spec.kind, container)
        yield from self._decide(container, lambda: run.first(container.scope))

    def _decide(
        self, container: ContainerExecution, ask: Callable[[], Rounds]
    ) -> Iterator[ev.Event]:
        """Start the rounds the container wants (`ask()`), and end it when no round
        runs and none was asked for."""
        rounds = container.decide(ask)
        # Dify announces the rounds it starts together first, then runs them.
        for round_ in rounds:
            if round_.announced:
                yield self.report.round_next(container, round_)
        for round_ in rounds:
            yield from self._start_round(container, round_)
        if container.running == 0:
            self._later.append(lambda: self._end_container(container))

    def _start_round(self, container: ContainerExecution, round_: Round) -> Iterator[ev.Event]:
        frame = container.open_round(round_, self._plan(container.graph))
        yield from self._launch(frame, [container.graph.start_id], None)
        self._left(frame)

    def _round_done(self, frame: Frame) -> Iterator[ev.Event]:
        container = frame.owner
        assert container is not None
        done = container.round_done(frame)
        yield from self._decide(container, lambda: container.run.after(done))
        if not container.stopping and self._durability is not cp.Durability.END and self._going:
            self._boundary([], None)  # a finished round is durable as a top-graph node is

    def _end_container(self, container: ContainerExecution) -> Iterator[ev.Event]:
        execution = container.execution
        container.cancel.release()
        if container.failure is not None:
            outcome = self._failed(execution, container.failure)
        else:
            try:
                outcome = succeeded(container.run.result(), 1)
            except Exception as exc:  # noqa: BLE001 - the container failed
                outcome = self._failed(execution, exc)
        yield from self._finish(execution, outcome)

    def _failed(self, execution: Execution, exc: BaseException) -> Outcome:
        if execution.frame.cancel.cancelled:
            return Outcome(Status.CANCELLED, 1, error=exc)
        return apply_strategy(execution.node, exc, 1)

    def _drain(self) -> Iterator[ev.Event]:
        """Report what was running when the run stopped: inline nodes that never
        ran, worker nodes once they notice the cancel (briefly), then containers."""
        while self._inline:
            execution = self._inline.popleft()
            self._in_flight.pop(execution.id, None)
            yield self.report.node_ended(execution, Outcome(Status.CANCELLED, 1))
        give_up = Deadline.after(DRAIN_GRACE_S)
        while any(e.container is None for e in self._in_flight.values()):
            item = self._inbox.get(give_up.remaining())
            if item is None:
                break
            if isinstance(item, Done):
                execution = item.execution
                self._in_flight.pop(execution.id, None)
                outcome = item.outcome
                if outcome.status is Status.SUCCEEDED:
                    execution.frame.scope.set_outputs(execution.node.id, outcome.outputs)
                if outcome.status is Status.FAILED and self.cancel.cancelled:
                    # It failed because the run was stopped under it.
                    outcome = Outcome(Status.CANCELLED, outcome.attempt, error=outcome.error)
                yield self.report.node_ended(execution, outcome)
        for execution in reversed(list(self._in_flight.values())):  # innermost first
            if execution.container is not None:
                self._in_flight.pop(execution.id, None)
                self._holding -= 1
                execution.container.cancel.release()
                yield self.report.node_ended(execution, Outcome(Status.CANCELLED, 1))

    # ---- checkpoints: taken at node boundaries, written as durability says

    def _boundary(self, ready: list[str], predecessor: str | None) -> None:
        """A node of the top graph finished: its state is durable now (per node),
        or with the next batch; `ready` (the nodes it made ready) start after."""
        if self._durability is cp.Durability.BATCHED:
            now = time.monotonic()
            if now - self._last_save < self._batch_s:
                return
            self._last_save = now
        # Per node, the checkpoint may go to the run's journal first (one append, the
        # tables a moment later: `store.run_journal`), as durable as a commit.
        journal = self._durability is cp.Durability.NODE
        self._write(ready=[(n, predecessor) for n in ready], journal=journal)

    def _write(
        self,
        after: int = 0,
        ready: list[tuple[str, str | None]] | None = None,
        *,
        row: bool = False,
        journal: bool = False,
    ) -> bool:
        try:
            self._save(after, ready or [], row=row, journal=journal)
        except Exception as exc:  # noqa: BLE001 - a run that cannot be made durable fails
            self._stop(Stop(aborted=False, reason=str(exc), error=exc))
            return False
        return True

    def snapshot(
        self, after: int = 0, ready: list[tuple[str, str | None]] | None = None
    ) -> cp.Snapshot:
        """The run's whole state now, at a node boundary (the dispatcher's thread
        only): `after` events will have gone out when it is read back; `ready`
        are the nodes about to start (node, predecessor)."""
        data = self._state(after, ready or [], every_value=True)
        snapshot = cp.Snapshot.model_validate(data)
        self.checkpoint = snapshot
        return snapshot

    def _state(
        self, after: int, ready: list[tuple[str, str | None]], *, every_value: bool
    ) -> dict[str, Any]:
        """The snapshot as plain data. Without `every_value`, only the variables
        that may still change (`sys`, `conversation`): finished nodes' outputs go
        to the store once, as parts (`_save`)."""
        top = self._top
        running: dict[Frame, list[Execution]] = {}
        for execution in self._in_flight.values():
            running.setdefault(execution.frame, []).append(execution)
        paused: dict[Frame, list[tuple[Execution, Pause]]] = {}
        for execution, pause in self._paused:
            paused.setdefault(execution.frame, []).append((execution, pause))
        if every_value:
            values = cp.node_values({h: v for h, v in top.scope.layer().items() if h != "env"})
        else:  # env is never stored: a resumed run resolves it again
            values = self._changing_values(top.scope)
        frame = _frame_state(top, values, running, paused, ready)
        if self._run_state is None:
            self._run_state = {
                "graph_hash": self.graph_hash,
                "run": cp.RunState.of(self.info).model_dump(),
                "inputs": cp.encode(self.inputs),
                "query": self.session.options.query,
                "root": self.session.options.root,
                "started_at": self.session.started_at,
            }
        return {
            "version": cp.SNAPSHOT_VERSION,
            **self._run_state,
            "position": self.position + after,
            "report": _encoded_state(self.report.state()),
            "frame": frame,
            "taken_at": time.time(),
        }

    def _changing_values(self, scope: VariablePool) -> dict[str, dict[str, Any]]:
        """`sys` and `conversation` encoded for a head: again only after a write."""
        writes = tuple(scope.writes(h) for h in _CHANGING)
        if self._changing is None or self._changing[0] != writes:
            values = cp.node_values({h: scope.own(h) or {} for h in _CHANGING})
            self._changing = (writes, values)
        return self._changing[1]

    def _save(
        self,
        after: int,
        ready: list[tuple[str, str | None]],
        *,
        row: bool = False,
        journal: bool = False,
    ) -> None:
        """Write the checkpoint: its head, the outputs of the nodes finished since
        the last (parts), the node executions not written yet, the run's row."""
        if self._checkpointer is None:
            return
        status = cp.PAUSED if self._paused and len(self._in_flight) == self._holding else cp.RUNNING
        head = self._state(after, ready, every_value=False)
        scope = self._top.scope
        parts = {n: cp.encode(scope.own(n) or {}) for n in self._unwritten}
        records = self.report.records
        nodes: list[Any] = []
        run = None
        if not self.info.chat:  # a chat turn's run is written with its message, at its end
            nodes = records[self._saved_records :]
            now = time.monotonic()
            # The run's row (its progress) at most every PROGRESS_S, and whenever the
            # dispatcher is about to wait (`row`); its node executions each time.
            due = self._row_at is None or now - self._row_at >= cp.PROGRESS_S
            if row or due or status == cp.PAUSED:
                run = self.session.progress_record(self.report.progress(status), ())
                self._row_at = now
            self._row_behind = run is None
        try:
            held = _in_records(parts, nodes)
            self._checkpointer.save(
                self.info, head, parts, run, nodes, status=status, in_records=held, journal=journal
            )
        except Exception:  # noqa: BLE001 - text a store cannot hold: once more, made storable
            again = [storable(n) for n in nodes]  # their outputs may differ now: parts whole
            self._checkpointer.save(
                self.info, head, parts, run, again, status=status, journal=journal
            )
        self._saved_records += len(nodes)  # a chat turn's go with its message, at its end
        self._unwritten.clear()

    def _record_end(self, summary: RunSummary) -> None:
        """The run's end record, without the node executions its checkpoints wrote."""
        self.session.finish(summary, written=self._saved_records)

    def _pause_run(self) -> Iterator[ev.Event]:
        """Nothing runs but paused nodes: write the checkpoint, send the nodes'
        own events, then `workflow_paused`. The run ends here; nothing of it waits."""
        notices = [(e, n) for e, p in self._paused for n in p.events]
        try:
            self.snapshot(after=len(notices) + 1)  # kept whole: `checkpoint`, without a store
            self._save(len(notices) + 1, [])
        except Exception as exc:  # noqa: BLE001 - a pause that cannot be kept fails the run
            yield from self.report.ended(self.report.failed(exc), self._record_end)
            return
        for execution, notice in notices:
            yield self.report.announced(execution, notice)
        yield self.report.paused([p for _, p in self._paused])

    def _restart(self, resume: Resume) -> Iterator[ev.Event]:
        """Go on from `resume`'s checkpoint: the state back in place, what was in
        flight started again (same execution ids), containers' rounds in flight
        going on, resolved paused nodes finished."""
        snapshot, top = resume.snapshot, self._top
        values = cp.restored_values(snapshot.frame.values)
        values["env"] = dict(self.session.environment)
        top.scope.restore_layer(values)
        self.report.restore(cp.decode(snapshot.report))
        if not resume.parts_written:  # a snapshot handed over whole: all of it goes
            self._unwritten = [h for h in values if h in top.graph.nodes]
        started = self.graph.start_id in values
        yield from self._restore(top, snapshot.frame, resume, started)

    def _restore(
        self, frame: Frame, state: cp.FrameState, resume: Resume, started: bool
    ) -> Iterator[ev.Event]:
        """A frame of the checkpoint (its scope's values already back) goes on:
        the top graph's or a round's, the same way."""
        done = [h for h in frame.scope.layer() if h in frame.graph.nodes]  # finished: outputs
        frame.scheduler.restore(state.scheduler, done)
        if frame.streamer is not None and state.streamer is not None:
            frame.streamer.restore(state.streamer, frame.scheduler.taken_edges(), started)
        frame.chunk_target.update(state.chunk_target)
        frame.broke = state.broke
        if state.error is not None:
            frame.error = RuntimeError(state.error)  # its text, already in the run's language
        whole = [c for c in state.containers if c.progress is None]  # nothing known of its rounds
        again = cp.executions([*state.running, *(c.execution for c in whole)])
        unsafe = [item for item in again if not _repeatable(frame.graph, item.node_id)]
        if unsafe:
            # At least once is not good enough for these: fail instead of repeating.
            for item in unsafe:
                error = cp.CheckpointError(
                    "errors.checkpoint.unsafeToRepeat", run=self.run_id, node=item.node_id
                )
                execution = self._revive(frame, item)  # its node_started went out before
                yield from self._finish(execution, Outcome(Status.FAILED, 1, error=error))
                if self._failure is None:  # in a round too: the run fails, not the round
                    self._failure = (execution.node, error)
                    self.cancel.cancel(f"node {item.node_id} failed")
            return
        for item in again:
            frame.scheduler.reset(item.node_id)
            if frame.streamer is not None:
                frame.streamer.on_retry(item.node_id)  # its unread text comes again
        for item in again:
            yield from self._relaunch(frame, item)
        for container in state.containers:
            if container.progress is not None:
                yield from self._resume_container(frame, container, resume)
        for ready in state.ready:
            yield from self._launch(frame, [ready.node_id], ready.predecessor)
        for paused in state.paused:
            execution = self._revive(frame, paused.execution)
            answer = resume.resolved.get(paused.execution.node_id)
            if answer is None:
                payload, reason = cp.decode(paused.payload), cp.decode(paused.reason)
                self._paused.append((execution, Pause(execution.node.id, payload, reason)))
                self._in_flight.pop(execution.id, None)
                if frame.owner is None:
                    self._left(frame)  # a round stays open while its node is paused
                continue
            for notice in answer.events:
                yield self.report.announced(execution, notice)
            handles = frozenset({answer.handle}) if answer.handle is not None else None
            outcome = Outcome(
                Status.SUCCEEDED,
                1,
                outputs=dict(answer.outputs),
                handles=handles,
                inputs=dict(answer.inputs),
                process_data=dict(answer.process_data),
            )
            yield from self._finish(execution, outcome)

    def _resume_container(
        self, frame: Frame, state: cp.ContainerState, resume: Resume
    ) -> Iterator[ev.Event]:
        """A container of the checkpoint goes on (its `*_started` went out before):
        its finished rounds' results back in its `ContainerRun`, its rounds in
        flight restored as frames, then the rounds it wants next."""
        execution = self._revive(frame, state.execution)
        node, spec = execution.node, execution.node.spec.container
        assert spec is not None and state.progress is not None
        try:  # its inputs are read again, from the restored scope: the same
            run = spec.start(node.data, self._inbox.context(execution, 1, on_dispatcher=True))
        except Exception as exc:  # noqa: BLE001 - reported as the container's failure
            yield from self._finish(execution, self._failed(execution, exc))
            return
        container = execution.container = ContainerExecution.open(execution, run, spec.kind)
        self._holding += 1
        container.scope.restore_layer({node.id: cp.decode(state.variables)})
        container.tokens = state.tokens
        plan = self._plan(container.graph)
        for round_state in state.frames:
            round_frame = container.open_round(Round(round_state.index), plan)
            round_frame.scope.restore_layer(cp.restored_values(round_state.values))
            yield from self._restore(round_frame, round_state, resume, True)
            self._left(round_frame)
        container.rounds = state.rounds
        progress = cp.decode(state.progress)
        in_flight = [f.index for f in state.frames]
        yield from self._decide(container, lambda: run.resumed(progress, in_flight))

    def _revive(self, frame: Frame, state: cp.ExecutionState) -> Execution:
        """A node execution of the checkpoint, under its own id and index, in flight."""
        execution = Execution.start(frame.graph.nodes[state.node_id], frame, 0, state.predecessor)
        execution.id, execution.index, execution.created_at = (
            state.id,
            state.index,
            state.created_at,
        )
        frame.scheduler.mark_running(state.node_id)
        frame.active += 1
        self._in_flight[execution.id] = execution
        return execution

    def _relaunch(self, frame: Frame, state: cp.ExecutionState) -> Iterator[ev.Event]:
        """A node that was in flight when the checkpoint was taken runs again."""
        execution = self._revive(frame, state)
        if execution.node.spec.container is not None:
            yield from self._start_container(execution)
            return
        yield self.report.node_started(execution)
        if execution.node.spec.inline and execution.node.retries == 0:
            self._inline.append(execution)
        else:
            self._submit(execution)

    # ---- how the run ends

    def _stopped(self) -> ev.WorkflowFinished:
        if self._failure is not None:
            return self.report.failed(self._failure[1])
        stop = self._stop_message
        assert stop is not None
        if stop.aborted:
            return self.report.stopped(stop.reason)
        return self.report.failed(stop.error or LimitExceededError("cli.limit.time", limit="?"))


@dataclasses.dataclass(frozen=True, slots=True)
class Resume:
    """What a resumed run goes on from: its checkpoint, and how its paused nodes
    finish (node id -> `Resolved`)."""

    snapshot: cp.Snapshot
    resolved: Mapping[str, cp.Resolved] = dataclasses.field(default_factory=dict)
    parts_written: bool = False  # read from the store: its nodes' outputs are there


def _repeatable(graph: Graph, node_id: str) -> bool:
    """Whether the node (a container: every node of its rounds) may run twice."""
    node = graph.nodes[node_id]
    if not node.spec.repeatable(node.data):
        return False
    inner = graph.children.get(node_id)
    return inner is None or all(_repeatable(inner, n) for n in inner.nodes)


def _in_records(parts: Mapping[str, Any], nodes: Sequence[NodeExecutionRecord]) -> dict[str, str]:
    """The finished nodes (of `parts`) whose execution record, written with the same
    checkpoint, holds exactly their outputs: node id -> execution id."""
    if not nodes:
        return {}
    latest = {record.node_id: record for record in nodes}
    return {
        node: latest[node].id
        for node, value in parts.items()
        if node in latest and latest[node].outputs == value
    }


# The top scope's variables that change after they are first set.
_CHANGING = ("sys", "conversation")


def _in_parallel_round(frame: Frame) -> bool:
    """Whether `frame` is (or is inside) a round of a container running several
    at once: a pause there is refused."""
    owner = frame.owner
    while owner is not None:
        if owner.run.parallel:
            return True
        owner = owner.execution.frame.owner
    return False


def _frame_state(
    frame: Frame,
    values: Mapping[str, Mapping[str, Any]],
    running: Mapping[Frame, list[Execution]],
    paused: Mapping[Frame, list[tuple[Execution, Pause]]],
    ready: Sequence[tuple[str, str | None]] = (),
) -> dict[str, Any]:
    """A frame's `FrameState` as plain data: `values` (what of its scope is kept, encoded),
    its executions in flight (`running`, by frame) and paused nodes."""
    executions = running.get(frame, ())
    return {
        "index": frame.index,
        "values": values,
        "scheduler": frame.scheduler.saved(),
        "streamer": frame.streamer.saved() if frame.streamer is not None else None,
        "chunk_target": dict(frame.chunk_target),
        "ready": [{"node_id": n, "predecessor": p} for n, p in ready],
        "running": [_execution_state(e) for e in executions if e.container is None],
        "paused": [
            {
                "execution": _execution_state(e),
                "payload": cp.encode(p.payload),
                "reason": cp.encode(p.reason),
            }
            for e, p in paused.get(frame, ())
        ],
        "containers": [
            _container_state(e.container, running, paused)
            for e in executions
            if e.container is not None
        ],
        "error": str(frame.error) if frame.error is not None else None,
        "broke": frame.broke,
    }


def _encoded_state(state: dict[str, Any]) -> dict[str, Any]:
    """The report's totals for a head: only what may hold files or odd numbers encoded
    (the counts, the elapsed time and the answer are plain)."""
    for key in ("outputs", "usage", "written", "retriever_resources"):
        if state[key]:  # empty at most nodes: nothing to encode (the head is written at once)
            state[key] = cp.encode(state[key])
    return state


def _container_state(
    container: ContainerExecution,
    running: Mapping[Frame, list[Execution]],
    paused: Mapping[Frame, list[tuple[Execution, Pause]]],
) -> dict[str, Any]:
    """A container in flight: what its finished rounds made and its rounds in
    flight; of one that is stopping, nothing of its rounds (it runs again)."""
    execution = container.execution
    progress, frames = None, []
    if not container.stopping:
        progress = cp.encode(container.run.saved())
        frames = [
            _frame_state(f, cp.node_values(f.scope.layer()), running, paused)
            for f in container.frames.values()
        ]
    return {
        "execution": _execution_state(execution),
        "kind": container.kind,
        "rounds": container.rounds,
        "round_index": container.rounds - 1 if container.rounds else None,
        "variables": cp.encode(container.scope.own(execution.node.id) or {}),
        "tokens": container.tokens,
        "progress": progress,
        "frames": frames,
    }


def _execution_state(execution: Execution) -> dict[str, Any]:
    return {
        "id": execution.id,
        "node_id": execution.node.id,
        "index": execution.index,
        "predecessor": execution.predecessor,
        "created_at": execution.created_at,
    }
