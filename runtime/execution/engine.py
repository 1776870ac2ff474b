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
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from firstgate.common.cancel import CancelToken
from firstgate.nodes.base import (
    NeedsWorker,
    Role,
    Round,
    Rounds,
)
from firstgate.runtime.dsl.graph import Graph, NodeDef
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
from firstgate.runtime.execution.session import RunSession
from firstgate.runtime.execution.variable_pool import VariablePool
from firstgate.runtime.execution.worker_pool import WorkerPool

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
    ) -> None:
        """`resources` are shared and never closed here; `owned` is what the run
        closes when it ends (its session, resources opened for it alone)."""
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
        self._inline: deque[Execution] = deque()  # started, to run on the dispatcher
        # Rounds and containers whose last execution ended, to conclude next
        # (queued, not nested: a thousand short rounds must not nest a thousand calls).
        self._later: deque[Callable[[], Iterator[ev.Event]]] = deque()
        self._failure: tuple[NodeDef, BaseException] | None = None
        self._stop_message: Stop | None = None
        self._stop_lock = threading.Lock()
        self._deadline = Deadline(None)  # set when the run starts
        self._events = self._run()

    # ---- public surface

    def __iter__(self) -> Iterator[ev.Event]:
        return self

    def __next__(self) -> ev.Event:
        return next(self._events)

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
            yield self.report.started()
            self._deadline = Deadline.after(self.limits.max_run_seconds)
            try:
                # Started here, in the caller's thread, so the server dies with its owner.
                self.resources.start_local(self.providers)
            except Exception as exc:  # noqa: BLE001 - reported as the run's failure
                yield from self.report.ended(self.report.failed(exc), self.session.finish)
                return
            if self._warm_code_executor:
                self.resources.warm_up_code_executor()
            yield from self._launch(self._top, [self.graph.start_id], None)
            yield from self._pump()
            while self._in_flight and self._going:
                item = self._next()
                if isinstance(item, Done):
                    yield from self._finish(item.execution, item.outcome)
                else:
                    yield from self._relay(item)
                yield from self._pump()
            if self._going:
                yield from self.report.ended(self.report.succeeded(), self.session.finish)
                return
            yield from self._drain()
            yield from self.report.ended(self._stopped(), self.session.finish)
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
            if node.spec.inline and node.retries == 0:
                self._inline.append(execution)
            else:
                self._submit(execution)

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
        self._in_flight.pop(execution.id, None)
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
                execution.container.cancel.release()
                yield self.report.node_ended(execution, Outcome(Status.CANCELLED, 1))

    # ---- how the run ends

    def _stopped(self) -> ev.WorkflowFinished:
        if self._failure is not None:
            return self.report.failed(self._failure[1])
        stop = self._stop_message
        assert stop is not None
        if stop.aborted:
            return self.report.stopped(stop.reason)
        return self.report.failed(stop.error or LimitExceededError("cli.limit.time", limit="?"))
