"""One workflow run: the dispatcher.

The dispatcher runs in whichever thread (or greenlet) iterates the run. It
launches ready nodes on the worker pool, receives their events and outcomes
through one queue, updates the variable pool and the scheduler, streams
answers, and decides how the run ends. Abort, failure and the time limit all
stop the run through `_stop`: cancel the token (which shuts in-flight LLM
sockets down through their gates), wake the dispatcher, drain, report.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from connectors.hub import Connectors
from nodes.base import Clients, NodeContext
from nodes.cancel import CancelToken
from plugin_daemon_client.errors import FirstGateError
from plugin_daemon_client.fallback import FallbackEvent
from plugin_daemon_client.gate import WaitInfo
from runtime import events as ev
from runtime.answer_stream import AnswerStreamer, Piece
from runtime.error_handler import Outcome, Status, error_type, execute
from runtime.graph import Graph, NodeDef
from runtime.limits import Deadline, LimitExceededError, RunLimits, steps_exceeded, time_exceeded
from runtime.route_clients import RouteClients
from runtime.scheduler import Scheduler
from runtime.variable_pool import VariablePool
from runtime.worker_pool import WorkerPool
from sandbox.executor import CodeExecutor

# How long a stopped run waits for its in-flight nodes to notice the cancel.
DRAIN_GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class _Done:
    node_id: str
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class _Stop:
    aborted: bool  # True: the caller aborted; False: a limit was exceeded
    reason: str
    error: BaseException | None = None


class WorkflowRun:
    """Iterate for events; `abort()` from any thread or greenlet stops the run promptly."""

    def __init__(
        self,
        graph: Graph,
        inputs: dict[str, Any],
        *,
        environment: dict[str, Any],
        providers: set[str],
        query: str,
        clients: Clients,
        limits: RunLimits,
        max_workers: int,
        run_id: str,
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
        self.run_id = run_id
        self.limits = limits
        self.clients = clients
        self.cancel = CancelToken()
        self.pool = VariablePool(
            {
                "query": query,
                "files": [],
                "workflow_run_id": run_id,
                "user_id": "",
                "app_id": "",
                "workflow_id": "",
                "conversation_id": "",
                "dialogue_count": 0,
            },
            environment,
        )
        self.scheduler = Scheduler(self.graph)
        self.streamer = AnswerStreamer(self.graph, self.scheduler, self.pool)
        self.status: str | None = None
        self.outputs: dict[str, Any] = {}
        self._queue: queue.Queue[object] = queue.Queue()
        self._workers = WorkerPool(max_workers)
        self._in_flight: set[str] = set()
        self._chunk_target: dict[str, str | None] = {}  # LLM node -> route of its latest chunk
        self._steps = 0
        self._exceptions = 0
        self._answers: list[str] = []
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

    def _run(self) -> Iterator[ev.Event]:
        self._t0 = time.monotonic()
        deadline = Deadline(self.limits.max_run_seconds, self._time_limit)
        try:
            yield ev.WorkflowStarted(
                elapsed=self._elapsed(), run_id=self.run_id, inputs=dict(self.inputs)
            )
            deadline.start()
            try:
                if isinstance(self.clients, RouteClients) and self.clients.needs_local(
                    self.providers
                ):
                    # Started here, in the caller's thread, so the server dies with us.
                    self.clients.start_local()
            except Exception as exc:  # noqa: BLE001 - reported as the run's failure
                yield self._terminal_failed(exc)
                return
            if self._start_code_executor and self.code_executor is not None:
                # Warm up in the background; a code node waits for a worker if it must.
                threading.Thread(target=self._warm_up_code_executor, daemon=True).start()
            for node_id in self.scheduler.roots():
                yield from self._launch(node_id)
            while self._in_flight and self._stop_message is None and self._failure is None:
                item = self._queue.get()
                if isinstance(item, _Done):
                    yield from self._finish(item)
                elif isinstance(item, ev.Event):
                    yield from self._relay(item)
            if self._stop_message is None and self._failure is None:
                yield self._terminal_success()
                return
            yield from self._drain()
            yield self._terminal_stopped()
        finally:
            deadline.cancel()
            self.cancel.cancel("run finished")
            self._workers.shutdown(timeout=1.0)
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

    def _launch(self, node_id: str) -> Iterator[ev.Event]:
        if self.cancel.cancelled:
            return
        self._steps += 1
        if self._steps > self.limits.max_steps:
            error = steps_exceeded(self.limits.max_steps)
            self._stop(_Stop(aborted=False, reason=str(error), error=error))
            return
        node = self.graph.nodes[node_id]
        self.scheduler.mark_running(node_id)
        self._in_flight.add(node_id)
        yield ev.NodeStarted(
            elapsed=self._elapsed(), node_id=node.id, node_type=node.type, title=node.title
        )
        yield from self._pieces(self.streamer.advance_all())
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

    def _context(self, node: NodeDef, attempt: int) -> NodeContext:
        common = {"node_id": node.id, "node_type": node.type, "title": node.title}

        def chunk(text: str, target: str | None = None) -> None:
            self._queue.put(
                ev.NodeChunk(
                    elapsed=self._elapsed(), attempt=attempt, text=text, target=target, **common
                )
            )

        def wait(info: WaitInfo, target: str | None = None) -> None:
            self._queue.put(
                ev.NodeWaiting(
                    elapsed=self._elapsed(),
                    attempt=attempt,
                    wait_elapsed=info.elapsed_s,
                    message=info.message,
                    message_key=info.message_key,
                    params=info.params,
                    target=target,
                    **common,
                )
            )

        def fallback(event: FallbackEvent) -> None:
            self._queue.put(self._fallback_event(event, attempt, common))

        return NodeContext(
            node_id=node.id,
            attempt=attempt,
            variables=self.pool,
            cancel=self.cancel,
            emit_chunk=chunk,
            emit_wait=wait,
            emit_fallback=fallback,
            clients=self.clients,
            inputs=self.inputs,
            code_executor=self.code_executor,
            connectors=self.connectors,
        )

    def _fallback_event(
        self, event: FallbackEvent, attempt: int, common: dict[str, str]
    ) -> ev.NodeFallback:
        """A decision of the transport's fallback chain as a run event."""
        return ev.NodeFallback(
            elapsed=self._elapsed(),
            attempt=attempt,
            kind=event.kind,
            reason=event.reason,
            target=event.target,
            message=event.message,
            message_key=event.message_key,
            params=dict(event.params),
            **common,
        )

    def _retry_reporter(self, node: NodeDef) -> Any:
        def report(attempt: int, exc: Exception, interval_ms: int) -> None:
            self._queue.put(
                ev.NodeRetry(
                    elapsed=self._elapsed(),
                    node_id=node.id,
                    node_type=node.type,
                    title=node.title,
                    attempt=attempt,
                    error_type=error_type(exc),
                    error_message=str(exc),
                    partial_text=exc.partial_text if isinstance(exc, FirstGateError) else "",
                    retry_interval_ms=interval_ms,
                    error=exc,
                )
            )

        return report

    def _relay(self, event: ev.Event) -> Iterator[ev.Event]:
        if self.cancel.cancelled:
            return  # chunks of a stopped run are noise
        yield event
        if isinstance(event, ev.NodeChunk):
            self._chunk_target[event.node_id] = event.target
            yield from self._pieces(
                self.streamer.on_chunk(event.node_id, event.attempt, event.text)
            )
        elif isinstance(event, ev.NodeRetry) or (
            isinstance(event, ev.NodeFallback) and event.kind == "swap"
        ):
            # Buffered text of the failed attempt (or failed fallback target) is
            # never shown: the next one replaces it.
            self.streamer.on_retry(event.node_id)

    def _pieces(self, pieces: list[Piece]) -> Iterator[ev.Event]:
        for piece in pieces:
            target = self.graph.nodes[piece.target_id]
            yield ev.AnswerChunk(
                elapsed=self._elapsed(),
                node_id=target.id,
                node_type=target.type,
                title=target.title,
                text=piece.text,
                from_node_id=piece.source,
                attempt=piece.attempt,
                # Buffers are dropped on every retry and swap, so a streamed
                # piece always comes from the source's latest target.
                target=(
                    self._chunk_target.get(piece.source)
                    if piece.source is not None and piece.attempt is not None
                    else None
                ),
            )

    def _finish(self, done: _Done) -> Iterator[ev.Event]:
        node = self.graph.nodes[done.node_id]
        outcome = done.outcome
        self._in_flight.discard(node.id)
        common = {
            "elapsed": self._elapsed(),
            "node_id": node.id,
            "node_type": node.type,
            "title": node.title,
        }
        if outcome.status is Status.SUCCEEDED:
            self.pool.set_outputs(node.id, outcome.outputs)
            yield from self._pieces(self.streamer.finish(node.id))
            self._collect_outputs(node, outcome.outputs)
            yield ev.NodeSucceeded(
                attempt=outcome.attempt,
                outputs=outcome.outputs,
                process_data=outcome.process_data,
                **common,
            )
        elif outcome.status is Status.EXCEPTION:
            assert outcome.error is not None
            self._exceptions += 1
            self.pool.set_outputs(node.id, outcome.outputs)
            yield ev.NodeException(
                attempt=outcome.attempt,
                strategy=outcome.strategy or "",
                error_type=error_type(outcome.error),
                error_message=str(outcome.error),
                outputs=outcome.outputs,
                error=outcome.error,
                **common,
            )
        else:
            yield self._node_failed(node, outcome)
            if outcome.status is Status.FAILED and self._failure is None:
                self._failure = (node, outcome.error or RuntimeError("node failed"))
                self.cancel.cancel(f"node {node.id} failed")
            return
        ready = self.scheduler.complete(node.id, outcome.handles)
        yield from self._pieces(self.streamer.advance_all())
        for node_id in ready:
            yield from self._launch(node_id)

    def _node_failed(self, node: NodeDef, outcome: Outcome) -> ev.NodeFailed:
        error = outcome.error
        return ev.NodeFailed(
            elapsed=self._elapsed(),
            node_id=node.id,
            node_type=node.type,
            title=node.title,
            attempt=outcome.attempt,
            error_type=error_type(error) if error else "StreamCancelledError",
            error_message=str(error) if error else (self.cancel.reason or "cancelled"),
            error=error,
        )

    def _collect_outputs(self, node: NodeDef, outputs: dict[str, Any]) -> None:
        if node.type == "end":
            self.outputs.update(outputs)
        elif node.type == "answer":
            self._answers.append(str(outputs.get("answer", "")))
            self.outputs["answer"] = "".join(self._answers)

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
                    yield ev.NodeSucceeded(
                        elapsed=self._elapsed(),
                        node_id=node.id,
                        node_type=node.type,
                        title=node.title,
                        attempt=item.outcome.attempt,
                        outputs=item.outcome.outputs,
                        process_data=item.outcome.process_data,
                    )
                else:
                    yield self._node_failed(node, item.outcome)

    # ---- how the run ends

    def _terminal_success(self) -> ev.Event:
        if self._exceptions:
            self.status = "partial-succeeded"
            return ev.WorkflowPartialSucceeded(
                elapsed=self._elapsed(),
                outputs=dict(self.outputs),
                exceptions_count=self._exceptions,
            )
        self.status = "succeeded"
        return ev.WorkflowSucceeded(elapsed=self._elapsed(), outputs=dict(self.outputs))

    def _terminal_failed(self, error: BaseException) -> ev.WorkflowFailed:
        self.status = "failed"
        return ev.WorkflowFailed(
            elapsed=self._elapsed(),
            error_type=error_type(error),
            error_message=str(error),
            outputs=dict(self.outputs),
            error=error,
        )

    def _terminal_stopped(self) -> ev.Event:
        if self._failure is not None:
            return self._terminal_failed(self._failure[1])
        stop = self._stop_message
        assert stop is not None
        if stop.aborted:
            self.status = "aborted"
            return ev.WorkflowAborted(
                elapsed=self._elapsed(), reason=stop.reason, outputs=dict(self.outputs)
            )
        return self._terminal_failed(
            stop.error or LimitExceededError("cli.limit.time", stop.reason)
        )
