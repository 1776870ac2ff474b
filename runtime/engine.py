"""One workflow run: the dispatcher.

The dispatcher runs in whichever thread (or greenlet) iterates the run. It
launches ready nodes on the worker pool, receives their chunks, notices and
outcomes through one queue, updates the variable pool and the scheduler,
streams the response nodes, and decides how the run ends. Abort, failure and
the time limit all stop the run through `_stop`: cancel the token (which shuts
in-flight LLM sockets down through their gates), wake the dispatcher, drain,
report.

Order, as Dify's graph engine emits it: when a node finishes, its outputs go
into the pool and its edges are resolved first, then the text this lets
through streams, then the node's `node_finished`, then the nodes it made
ready start. A chatflow's turn ends with `workflow_finished` followed by
`message_end` (or `error`). The run is recorded in the store just before
`workflow_finished`.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from connectors.hub import Connectors
from nodes.base import AgentLogEntry, Clients, NodeContext, Role
from nodes.cancel import CancelToken
from nodes.values import jsonable
from plugin_daemon_client.errors import FirstGateError
from plugin_daemon_client.fallback import FallbackEvent
from plugin_daemon_client.gate import WaitInfo
from runtime import events as ev
from runtime.error_handler import Outcome, Status, error_type, execute
from runtime.graph import Graph, NodeDef
from runtime.limits import Deadline, LimitExceededError, RunLimits, steps_exceeded, time_exceeded
from runtime.response_stream import Piece, ResponseStreamer
from runtime.route_clients import RouteClients
from runtime.scheduler import Scheduler
from runtime.session import RunSession, RunSummary
from runtime.variable_pool import VariablePool
from runtime.worker_pool import WorkerPool
from sandbox.executor import CodeExecutor
from store.base import NodeExecutionRecord

# How long a stopped run waits for its in-flight nodes to notice the cancel.
DRAIN_GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class _Done:
    node_id: str
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class _Chunk:
    node_id: str
    attempt: int
    text: str
    target: str | None


@dataclass(frozen=True, slots=True)
class _Stop:
    aborted: bool  # True: the caller aborted; False: a limit was exceeded
    reason: str
    error: BaseException | None = None


@dataclass(slots=True)
class _Execution:
    """One node execution: Dify's node execution id, index and timing."""

    id: str
    index: int
    predecessor: str | None
    started: float  # monotonic
    created_at: int
    attempt_started: dict[int, float] = field(default_factory=dict)
    first_token: set[tuple[int, str | None]] = field(default_factory=set)


class WorkflowRun:
    """Iterate for events; `abort()` from any thread or greenlet stops the run promptly."""

    def __init__(
        self,
        graph: Graph,
        inputs: dict[str, Any],
        *,
        session: RunSession,
        providers: set[str],
        clients: Clients,
        limits: RunLimits,
        max_workers: int,
        connectors: Connectors | None = None,
        code_executor: CodeExecutor | None = None,
        owns_code_executor: bool = False,
        start_code_executor: bool = False,
    ) -> None:
        self.graph = graph
        self.connectors = connectors
        self.code_executor = code_executor
        self._owns_code_executor = owns_code_executor
        self._start_code_executor = start_code_executor
        self.providers = providers  # of the LLM nodes the run can reach
        self.inputs = inputs
        self.session = session
        self.info = session.info
        self.run_id = session.info.workflow_run_id
        self.limits = limits
        self.clients = clients
        self.cancel = CancelToken()
        self.pool = VariablePool(
            session.system,
            session.environment,
            session.conversation,
            session.conversation_types,
            start_id=self.graph.start_id,
        )
        self.scheduler = Scheduler(self.graph)
        self.streamer = ResponseStreamer(self.graph, self.pool, self.scheduler.node_state)
        self.status: str | None = None
        self.outputs: dict[str, Any] = {}
        self.answer = ""  # what the response nodes streamed (a chat message's text)
        self._redact = session.redactor
        self._queue: queue.Queue[object] = queue.Queue()
        self._workers = WorkerPool(max_workers)
        self._in_flight: set[str] = set()
        self._executions: dict[str, _Execution] = {}
        self._records: list[NodeExecutionRecord] = []
        self._chunk_target: dict[str, str | None] = {}  # node -> route of its latest chunk
        self._steps = 0
        self._exceptions = 0
        self._tokens = 0
        self._usage: dict[str, int] = {}
        self._written: dict[str, Any] = {}  # conversation variables this run wrote
        self._failure: tuple[NodeDef, BaseException] | None = None
        self._stop_message: _Stop | None = None
        self._stop_lock = threading.Lock()
        self._t0 = time.monotonic()
        self._events = self._run()

    # ---- public surface

    def __iter__(self) -> Iterator[ev.Event]:
        return self

    def __next__(self) -> ev.Event:
        return next(self._events)

    def abort(self, reason: str = "workflow aborted") -> None:
        self._stop(_Stop(aborted=True, reason=reason))

    def close(self) -> None:
        """Stop and release everything if the caller stops iterating early."""
        self._events.close()

    # ---- stopping

    def _stop(self, message: _Stop) -> None:
        # Record why *before* cancelling: cancel() shuts in-flight streams down at
        # once, and a node that sees it can report back before this thread runs
        # on; the dispatcher must never take that node's end for a finished run.
        with self._stop_lock:
            if self._stop_message is not None or self.cancel.cancelled:
                return
            self._stop_message = message
        self.cancel.cancel(message.reason)  # shuts in-flight streams down via their gates
        self._queue.put(message)  # wakes the dispatcher

    def _time_limit(self) -> None:
        assert self.limits.max_run_seconds is not None
        error = time_exceeded(self.limits.max_run_seconds)
        self._stop(_Stop(aborted=False, reason=str(error), error=error))

    # ---- the dispatcher

    def _elapsed(self) -> float:
        return round(time.monotonic() - self._t0, 6)

    def _common(self) -> dict[str, Any]:
        return {"run": self.info, "elapsed": self._elapsed()}

    def _run(self) -> Iterator[ev.Event]:
        self._t0 = time.monotonic()
        deadline = Deadline(self.limits.max_run_seconds, self._time_limit)
        try:
            yield ev.WorkflowStarted(
                inputs=self._redact.value(jsonable(self.inputs)), **self._common()
            )
            deadline.start()
            try:
                if isinstance(self.clients, RouteClients) and self.clients.needs_local(
                    self.providers
                ):
                    # Started here, in the caller's thread, so the server dies with us.
                    self.clients.start_local()
            except Exception as exc:  # noqa: BLE001 - reported as the run's failure
                yield from self._end(self._terminal_failed(exc))
                return
            if self._start_code_executor and self.code_executor is not None:
                # Warm up in the background; a code node waits for a worker if it must.
                threading.Thread(target=self._warm_up_code_executor, daemon=True).start()
            yield from self._launch(self.graph.start_id, None)
            while self._in_flight and self._stop_message is None and self._failure is None:
                item = self._queue.get()
                if isinstance(item, _Done):
                    yield from self._finish(item)
                else:
                    yield from self._relay(item)
            if self._stop_message is None and self._failure is None:
                yield from self._end(self._terminal_success())
                return
            yield from self._drain()
            yield from self._end(self._terminal_stopped())
        finally:
            deadline.cancel()
            self.cancel.cancel("run finished")
            self._workers.shutdown(timeout=1.0)
            self.session.close()
            if isinstance(self.clients, RouteClients):
                self.clients.close()
            if self.connectors is not None:
                self.connectors.close()
            if self._owns_code_executor and self.code_executor is not None:
                self.code_executor.close()

    def _warm_up_code_executor(self) -> None:
        assert self.code_executor is not None
        with contextlib.suppress(Exception):  # the first code node reports it
            self.code_executor.start()

    def _launch(self, node_id: str, predecessor: str | None) -> Iterator[ev.Event]:
        if self.cancel.cancelled:
            return
        self._steps += 1
        if self._steps > self.limits.max_steps:
            error = steps_exceeded(self.limits.max_steps)
            self._stop(_Stop(aborted=False, reason=str(error), error=error))
            return
        node = self.graph.nodes[node_id]
        execution = _Execution(
            id=str(uuid.uuid4()),
            index=self._steps,
            predecessor=predecessor,
            started=time.monotonic(),
            created_at=int(time.time()),
        )
        self._executions[node_id] = execution
        self.scheduler.mark_running(node_id)
        self._in_flight.add(node_id)
        yield ev.NodeStarted(
            node_id=node.id,
            node_type=node.type,
            title=node.title,
            execution_id=execution.id,
            index=execution.index,
            predecessor_node_id=predecessor,
            created_at=execution.created_at,
            **self._common(),
        )
        self._workers.submit(lambda: self._execute(node))

    def _execute(self, node: NodeDef) -> None:
        """Runs on a worker: the node's attempts, retries and strategy."""
        try:
            outcome = execute(
                node,
                lambda attempt: self._context(node, attempt),
                self.cancel,
                self._retry_reporter(node),
            )
        except BaseException as exc:  # noqa: BLE001 - a bug in a node must still end the run cleanly
            outcome = Outcome(Status.FAILED, 1, error=exc)
        self._queue.put(_Done(node.id, outcome))

    def _node_fields(self, node: NodeDef) -> dict[str, Any]:
        return {
            "node_id": node.id,
            "node_type": node.type,
            "title": node.title,
            "execution_id": self._executions[node.id].id,
        }

    def _context(self, node: NodeDef, attempt: int) -> NodeContext:
        execution = self._executions[node.id]
        execution.attempt_started[attempt] = time.monotonic()

        def chunk(text: str, target: str | None = None) -> None:
            self._queue.put(_Chunk(node.id, attempt, text, target))

        def wait(info: WaitInfo, target: str | None = None) -> None:
            self._queue.put(
                ev.NodeWaiting(
                    attempt=attempt,
                    wait_elapsed=info.elapsed_s,
                    message=self._redact.text(info.message),
                    message_key=info.message_key,
                    params=self._redact.value(dict(info.params)),
                    target=target,
                    **self._node_fields(node),
                    **self._common(),
                )
            )

        def fallback(event: FallbackEvent) -> None:
            self._queue.put(self._fallback_event(node, event, attempt))

        def agent_log(entry: AgentLogEntry) -> None:
            self._queue.put(
                ev.AgentLog(
                    log_id=entry.id,
                    label=entry.label,
                    status=entry.status,
                    parent_id=entry.parent_id,
                    error=None if entry.error is None else self._redact.text(entry.error),
                    log_data=self._redact.value(dict(entry.data)),
                    metadata=dict(entry.metadata),
                    **self._node_fields(node),
                    **self._common(),
                )
            )

        return NodeContext(
            node_id=node.id,
            attempt=attempt,
            variables=self.pool,
            cancel=self.cancel,
            emit_chunk=chunk,
            emit_wait=wait,
            emit_fallback=fallback,
            emit_agent_log=agent_log,
            clients=self.clients,
            inputs=self.inputs,
            code_executor=self.code_executor,
            connectors=self.connectors,
            history=self.session.history,
        )

    def _fallback_event(self, node: NodeDef, event: FallbackEvent, attempt: int) -> ev.NodeFallback:
        """A decision of the transport's fallback chain as a run event."""
        return ev.NodeFallback(
            attempt=attempt,
            kind=event.kind,
            reason=event.reason,
            target=event.target,
            message=self._redact.text(event.message),
            message_key=event.message_key,
            params=self._redact.value(dict(event.params)),
            **self._node_fields(node),
            **self._common(),
        )

    def _retry_reporter(self, node: NodeDef) -> Any:
        def report(attempt: int, exc: Exception, interval_ms: int) -> None:
            execution = self._executions[node.id]
            self._queue.put(
                ev.NodeRetry(
                    attempt=attempt,
                    index=execution.index,
                    predecessor_node_id=execution.predecessor,
                    error_type=error_type(exc),
                    error_message=self._redact.text(str(exc)),
                    partial_text=self._redact.text(
                        exc.partial_text if isinstance(exc, FirstGateError) else ""
                    ),
                    retry_interval_ms=interval_ms,
                    created_at=execution.created_at,
                    finished_at=int(time.time()),
                    error=exc,
                    **self._node_fields(node),
                    **self._common(),
                )
            )

        return report

    def _relay(self, item: object) -> Iterator[ev.Event]:
        if self.cancel.cancelled:
            return  # what a stopped run's nodes still send is noise
        if isinstance(item, _Chunk):
            yield from self._on_chunk(item)
            return
        assert isinstance(item, ev.Event)
        yield item
        if isinstance(item, ev.NodeRetry) or (
            isinstance(item, ev.NodeFallback) and item.kind == "swap"
        ):
            # Text of the failed attempt (or failed fallback target) not yet
            # shown never will be: the next one replaces it.
            self.streamer.on_retry(item.node_id)

    def _on_chunk(self, chunk: _Chunk) -> Iterator[ev.Event]:
        node = self.graph.nodes[chunk.node_id]
        execution = self._executions[node.id]
        self._chunk_target[node.id] = chunk.target
        key = (chunk.attempt, chunk.target)
        if key not in execution.first_token:
            execution.first_token.add(key)
            started = execution.attempt_started.get(chunk.attempt, execution.started)
            yield ev.NodeFirstToken(
                attempt=chunk.attempt,
                target=chunk.target,
                ttft=round(time.monotonic() - started, 6),
                **self._node_fields(node),
                **self._common(),
            )
        yield from self._pieces(self.streamer.on_chunk(node.id, chunk.attempt, chunk.text))

    def _pieces(self, pieces: list[Piece]) -> Iterator[ev.Event]:
        for piece in pieces:
            text = self._redact.text(piece.text)
            self.answer += text
            streamed = piece.attempt is not None and piece.source is not None
            yield ev.TextChunk(
                node_id=piece.response_id,
                text=text,
                from_variable_selector=list(piece.selector),
                source_node_id=piece.source,
                attempt=piece.attempt,
                # Unread text is dropped on every retry and swap, so a streamed
                # piece always comes from the source's latest route.
                target=self._chunk_target.get(piece.source or "") if streamed else None,
                **self._common(),
            )

    def _finish(self, done: _Done) -> Iterator[ev.Event]:
        node = self.graph.nodes[done.node_id]
        outcome = done.outcome
        self._in_flight.discard(node.id)
        if outcome.status not in (Status.SUCCEEDED, Status.EXCEPTION):
            yield self._node_ended(node, outcome)
            if outcome.status is Status.FAILED and self._failure is None:
                self._failure = (node, outcome.error or RuntimeError("node failed"))
                self.cancel.cancel(f"node {node.id} failed")
            return
        self.pool.set_outputs(node.id, outcome.outputs)
        if outcome.status is Status.SUCCEEDED:
            for selector, value in outcome.updates.items():
                self.pool.set(selector, value)
                if selector[0] == "conversation":
                    self._written[selector[1]] = value
        else:
            self._exceptions += 1
        step = self.scheduler.complete(node.id, outcome.handles)
        yield from self._pieces(self.streamer.on_node_done(node.id, step.taken, step.skipped))
        yield self._node_ended(node, outcome)
        if node.spec.role is Role.RESPONSE and outcome.status is Status.SUCCEEDED:
            self._merge_response(outcome.outputs)
        for node_id in step.ready:
            yield from self._launch(node_id, node.id)

    def _merge_response(self, outputs: dict[str, Any]) -> None:
        # Dify's rule: answers add up, other outputs (an end node's) are set.
        for key, value in outputs.items():
            if key == "answer" and isinstance(value, str):
                self.outputs["answer"] = str(self.outputs.get("answer", "")) + value
            else:
                self.outputs[key] = value

    def _node_ended(self, node: NodeDef, outcome: Outcome) -> ev.NodeFinished:
        """The node's `node_finished` event, also kept for the run's record."""
        execution = self._executions[node.id]
        error = outcome.error
        metadata: dict[str, Any] = {}
        if outcome.usage:
            tokens = int(outcome.usage.get("total_tokens") or 0)
            self._tokens += tokens
            for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
                self._usage[key] = self._usage.get(key, 0) + int(outcome.usage.get(key) or 0)
            metadata.update(total_tokens=tokens, total_price=0, currency="USD")
        if outcome.strategy:
            metadata["error_strategy"] = outcome.strategy
        kind: type[ev.NodeFinished] = {
            Status.SUCCEEDED: ev.NodeSucceeded,
            Status.EXCEPTION: ev.NodeException,
            Status.FAILED: ev.NodeFailed,
            Status.CANCELLED: ev.NodeStopped,
        }[outcome.status]
        extra: dict[str, Any] = {}
        if kind is ev.NodeException:
            extra["strategy"] = outcome.strategy or ""
        if error is None and outcome.status is Status.CANCELLED:
            error_message: str | None = self.cancel.reason or "cancelled"
            kind_name: str | None = "StreamCancelledError"
        else:
            error_message = self._redact.text(str(error)) if error is not None else None
            kind_name = error_type(error) if error is not None else None
        event = kind(
            attempt=outcome.attempt,
            index=execution.index,
            predecessor_node_id=execution.predecessor,
            inputs=self._redact.value(jsonable(outcome.inputs)),
            outputs=self._redact.value(jsonable(outcome.outputs)),
            process_data=self._redact.value(jsonable(outcome.process_data)),
            execution_metadata=metadata,
            node_elapsed=round(time.monotonic() - execution.started, 6),
            created_at=execution.created_at,
            finished_at=int(time.time()),
            error_type=kind_name,
            error_message=error_message,
            error=error,
            **extra,
            **self._node_fields(node),
            **self._common(),
        )
        self._records.append(_record(event))
        return event

    def _drain(self) -> Iterator[ev.Event]:
        """Wait (briefly) for in-flight nodes to notice the cancel, and report them."""
        give_up = time.monotonic() + DRAIN_GRACE_S
        while self._in_flight:
            try:
                item = self._queue.get(timeout=max(0.0, give_up - time.monotonic()))
            except queue.Empty:
                break
            if isinstance(item, _Done):
                self._in_flight.discard(item.node_id)
                node = self.graph.nodes[item.node_id]
                if item.outcome.status is Status.SUCCEEDED:
                    self.pool.set_outputs(node.id, item.outcome.outputs)
                outcome = item.outcome
                if outcome.status is Status.FAILED and self.cancel.cancelled:
                    # It failed because the run was stopped under it.
                    outcome = Outcome(Status.CANCELLED, outcome.attempt, error=outcome.error)
                yield self._node_ended(node, outcome)

    # ---- how the run ends

    def _totals(self) -> dict[str, Any]:
        return {
            "outputs": self._redact.value(jsonable(self.outputs)),
            "total_tokens": self._tokens,
            "total_steps": self._steps,
            "exceptions_count": self._exceptions,
            "finished_at": int(time.time()),
        }

    def _terminal_success(self) -> ev.WorkflowFinished:
        if self._exceptions:
            self.status = "partial-succeeded"
            return ev.WorkflowPartialSucceeded(**self._totals(), **self._common())
        self.status = "succeeded"
        return ev.WorkflowSucceeded(**self._totals(), **self._common())

    def _terminal_failed(self, error: BaseException) -> ev.WorkflowFinished:
        self.status = "failed"
        return ev.WorkflowFailed(
            error_type=error_type(error),
            error_message=self._redact.text(str(error)),
            error=error,
            **self._totals(),
            **self._common(),
        )

    def _terminal_stopped(self) -> ev.WorkflowFinished:
        if self._failure is not None:
            return self._terminal_failed(self._failure[1])
        stop = self._stop_message
        assert stop is not None
        if stop.aborted:
            self.status = "stopped"
            return ev.WorkflowStopped(
                reason=stop.reason, error_message=stop.reason, **self._totals(), **self._common()
            )
        return self._terminal_failed(stop.error or LimitExceededError("cli.limit.time", limit="?"))

    def _end(self, terminal: ev.WorkflowFinished) -> Iterator[ev.Event]:
        """Record the run, then report its end (and the chat turn's)."""
        try:
            self.session.finish(
                RunSummary(
                    status=terminal.status,
                    inputs=self.inputs,
                    outputs=self.outputs,
                    error=terminal.error_message,
                    elapsed_time=self._elapsed(),
                    total_tokens=self._tokens,
                    total_steps=self._steps,
                    exceptions_count=self._exceptions,
                    nodes=self._records,
                    answer=self.answer,
                    conversation=self._written,
                )
            )
        except Exception as exc:  # noqa: BLE001 - a run that cannot be recorded has failed
            if terminal.status != "failed":
                terminal = self._terminal_failed(exc)
        yield terminal
        if not self.info.chat:
            return
        if isinstance(terminal, ev.WorkflowFailed):
            yield ev.ErrorEvent(message=f"Run failed: {terminal.error_message}", **self._common())
        else:
            usage = ev.llm_usage(self._usage, latency=self._elapsed())
            yield ev.MessageEnd(answer=self.answer, usage=usage, **self._common())


def _record(event: ev.NodeFinished) -> NodeExecutionRecord:
    return NodeExecutionRecord(
        id=event.execution_id,
        index=event.index,
        node_id=event.node_id,
        node_type=event.node_type,
        title=event.title,
        predecessor_node_id=event.predecessor_node_id,
        status=event.status,
        inputs=event.inputs,
        process_data=event.process_data,
        outputs=event.outputs,
        error=event.error_message,
        elapsed_time=event.node_elapsed,
        execution_metadata=event.execution_metadata,
        created_at=event.created_at,
        finished_at=event.finished_at,
    )
