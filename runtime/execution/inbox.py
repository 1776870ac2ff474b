"""How node executions talk to the dispatcher: one queue of messages (a chunk
of text, a notice, an outcome; a stop), and the `NodeContext` of each attempt,
whose sinks post into it.

A node running on a worker never touches the run's state: what it streams,
what its gate and fallback chain decide, its agent's steps and its retries
arrive here as messages (the notices already made into events by the run's
report), and the dispatcher takes them one at a time (`runtime/execution/engine.py`).
A node running on the dispatcher itself (`INLINE`) gets the same context.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from firstgate.connectors.hub import Connectors
from firstgate.nodes.base import AgentLogEntry, ChatTurn, Clients, NeedsWorker, NodeContext
from firstgate.plugin_daemon_client.fallback import FallbackEvent
from firstgate.plugin_daemon_client.gate import WaitInfo
from firstgate.runtime.execution import events as ev
from firstgate.runtime.execution.error_handler import OnRetry, Outcome, Status, execute
from firstgate.runtime.execution.frames import Execution
from firstgate.runtime.execution.run_report import RunReport
from firstgate.sandbox.executor import CodeExecutor


@dataclass(frozen=True, slots=True)
class Done:
    execution: Execution
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Chunk:
    execution: Execution
    attempt: int
    text: str
    target: str | None


@dataclass(frozen=True, slots=True)
class Notice:
    """An event a worker made for its execution (waiting, fallback, agent log, retry)."""

    execution: Execution
    event: ev.Event


@dataclass(frozen=True, slots=True)
class Stop:
    aborted: bool  # True: the caller aborted; False: a limit was exceeded
    reason: str
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class NodeShared:
    """What every attempt of the run's nodes gets in its context."""

    clients: Clients
    inputs: Mapping[str, Any]
    code_executor: CodeExecutor
    connectors: Connectors
    history: Sequence[ChatTurn]


class Inbox:
    def __init__(self, report: RunReport, shared: NodeShared) -> None:
        self._queue: queue.Queue[object] = queue.Queue()
        self._report = report
        self._shared = shared

    def put(self, message: object) -> None:
        self._queue.put(message)

    def empty(self) -> bool:
        return self._queue.empty()

    def get(self, timeout: float | None) -> object | None:
        """The next message, waiting up to `timeout` seconds (None: as long as it
        takes); None when none came."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def attempts(self, execution: Execution, on_dispatcher: bool = False) -> Outcome:
        """The node's attempts, retries and error strategy, each attempt with a
        context that posts here. On the dispatcher a node may raise `NeedsWorker`."""
        try:
            return execute(
                execution.node,
                lambda attempt: self.context(execution, attempt, on_dispatcher),
                execution.frame.cancel,
                self._on_retry(execution),
            )
        except NeedsWorker:
            raise
        except BaseException as exc:  # noqa: BLE001 - a bug in a node must still end the run cleanly
            return Outcome(Status.FAILED, 1, error=exc)

    def context(
        self, execution: Execution, attempt: int, on_dispatcher: bool = False
    ) -> NodeContext:
        execution.attempt_started[attempt] = time.monotonic()
        report, put, shared = self._report, self._queue.put, self._shared

        def chunk(text: str, target: str | None = None) -> None:
            put(Chunk(execution, attempt, text, target))

        def wait(info: WaitInfo, target: str | None = None) -> None:
            put(Notice(execution, report.waiting(execution, attempt, info, target)))

        def fallback(event: FallbackEvent) -> None:
            put(Notice(execution, report.fallback(execution, attempt, event)))

        def agent_log(entry: AgentLogEntry) -> None:
            put(Notice(execution, report.agent_log(execution, entry)))

        return NodeContext(
            node_id=execution.node.id,
            attempt=attempt,
            variables=execution.frame.scope,
            cancel=execution.frame.cancel,
            emit_chunk=chunk,
            emit_wait=wait,
            emit_fallback=fallback,
            emit_agent_log=agent_log,
            clients=shared.clients,
            inputs=shared.inputs,
            code_executor=shared.code_executor,
            connectors=shared.connectors,
            history=shared.history,
            on_dispatcher=on_dispatcher,
            # On the dispatcher a node makes no call that could be traced under it.
            trace=None if on_dispatcher else report.attempt_context(execution),
        )

    def _on_retry(self, execution: Execution) -> OnRetry:
        def report(attempt: int, exc: Exception, interval_ms: int) -> None:
            event = self._report.retry(execution, attempt, exc, interval_ms)
            self._queue.put(Notice(execution, event))

        return report
