"""What a run reports: every event it yields, made from the facts the dispatcher
hands over (a node started, a chunk arrived, a node ended, the run ended).

The dispatcher (`runtime/execution/engine.py`) decides what happens; `RunReport` says
it. It keeps the run's identity, its clock, the counts and the token usage,
the records of its node executions, its outputs and streamed answer, and the
summary the session records at the end. Every event of a run is built here,
so this is the one place where secrets are taken out of events (the
session's `Redactor`).

No threads and no queue: facts in, events out, so it is tested on its own
(`tests/unit/test_run_report.py`). The in-flight notices (waiting, fallback,
agent log, retry) are made on the node's worker and only read the report;
everything that counts is called from the dispatcher.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from firstgate.nodes.base import AgentLogEntry, NodeNotice, Pause, Round
from firstgate.nodes.values import jsonable
from firstgate.plugin_daemon_client.errors import FirstGateError
from firstgate.plugin_daemon_client.fallback import FallbackEvent
from firstgate.plugin_daemon_client.gate import WaitInfo
from firstgate.runtime.execution import events as ev
from firstgate.runtime.execution.error_handler import Outcome, Status, error_type
from firstgate.runtime.execution.frames import ContainerExecution, Execution, Frame
from firstgate.runtime.execution.redaction import Redactor, StreamRedaction
from firstgate.runtime.execution.response_stream import Piece
from firstgate.runtime.execution.session import RunSession, RunSummary
from firstgate.runtime.execution.telemetry import RunTelemetry
from firstgate.store.base import NodeExecutionRecord

_NODE_END: dict[Status, type[ev.NodeFinished]] = {
    Status.SUCCEEDED: ev.NodeSucceeded,
    Status.EXCEPTION: ev.NodeException,
    Status.FAILED: ev.NodeFailed,
    Status.CANCELLED: ev.NodeStopped,
}
_CONTAINER_END = {Status.SUCCEEDED: "succeeded", Status.CANCELLED: "stopped"}
_TOKEN_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


class RunReport:
    """One run's events and the totals they carry."""

    def __init__(
        self,
        info: ev.RunInfo,
        redactor: Redactor,
        inputs: dict[str, Any],
        *,
        show_retriever_resources: bool = False,
        clock: Callable[[], float] = time.monotonic,
        observer: RunTelemetry | None = None,
    ) -> None:
        """`show_retriever_resources`: the app's `features.retriever_resource`
        (the knowledge an answer used goes in `message_end`). `observer`: the
        run's spans and metrics (`runtime/execution/telemetry.py`), told every
        fact this report receives; None when telemetry is off."""
        self.info = info
        self.observer = observer
        self.inputs = inputs
        self._redact = redactor
        self._streams = StreamRedaction(redactor)
        self._pending: dict[tuple[str, str | None, int | None], tuple[Frame, Piece]] = {}
        self._show_resources = show_retriever_resources
        self._clock = clock
        self._t0 = clock()
        self.status: str | None = None  # set by the terminal event
        self.outputs: dict[str, Any] = {}
        self.answer = ""  # what the response nodes streamed (a chat message's text)
        self.steps = 0
        self.exceptions = 0
        self.tokens = 0
        self.usage: dict[str, int] = {}
        self.records: list[NodeExecutionRecord] = []
        self.written: dict[str, Any] = {}  # conversation variables the run wrote
        self.retriever_resources: list[dict[str, Any]] = []  # of every model call, in order

    @classmethod
    def of(cls, session: RunSession, inputs: dict[str, Any]) -> RunReport:
        """The report of the run `session` starts (its identity, its redactor, what its app shows)."""
        shown = session.workflow.show_retriever_resources
        app = getattr(session.workflow, "name", "") or session.info.app_id
        observer = RunTelemetry.start(session.info, app, session.options.traceparent)
        return cls(
            session.info,
            session.redactor,
            inputs,
            show_retriever_resources=shown,
            observer=observer,
        )

    # ---- facts the dispatcher hands over

    def next_index(self) -> int:
        """Count one more node execution; its 1-based index in the run."""
        self.steps += 1
        return self.steps

    def wrote(self, name: str, value: Any) -> None:
        self.written[name] = value

    def merge_response(self, outputs: dict[str, Any]) -> None:
        # Dify's rule: answers add up, other outputs (an end node's) are set.
        for key, value in outputs.items():
            if key == "answer" and isinstance(value, str):
                self.outputs["answer"] = str(self.outputs.get("answer", "")) + value
            else:
                self.outputs[key] = value

    # ---- the run starts; nodes start

    def started(self) -> ev.WorkflowStarted:
        """The run's first event; its clock starts here (when iteration begins)."""
        self._t0 = self._clock()
        if self.observer is not None:
            self.observer.run_started()
        return ev.WorkflowStarted(inputs=self._value(self.inputs), **self._common())

    def node_started(self, execution: Execution) -> ev.NodeStarted:
        if self.observer is not None:
            self.observer.node_started(execution)
        return ev.NodeStarted(
            index=execution.index,
            predecessor_node_id=execution.predecessor,
            created_at=execution.created_at,
            **self._node(execution),
            **self._common(),
        )

    def container_started(
        self, execution: Execution, kind: str, container: ContainerExecution | None
    ) -> ev.ContainerStarted:
        """`container` is None when the container could not start (its inputs were wrong)."""
        if self.observer is not None:
            self.observer.node_started(execution)
        extra: dict[str, Any] = {}
        if container is not None:
            extra = {
                "inputs": self._value(container.inputs),
                "metadata": jsonable(dict(container.run.metadata)),
            }
        return ev.ContainerStarted(
            kind=kind,
            created_at=execution.created_at,
            **extra,
            **self._node(execution),
            **self._common(),
        )

    def round_next(self, container: ContainerExecution, round_: Round) -> ev.ContainerNext:
        return ev.ContainerNext(
            kind=container.kind,
            index=round_.index,
            previous_output=self._value(round_.previous_output),
            duration=container.last_elapsed,
            created_at=int(time.time()),
            **self._node(container.execution),
            **self._common(),
        )

    # ---- what running nodes report

    def attempt_context(self, execution: Execution) -> Any:
        """The tracing context a node attempt runs in (`NodeContext.trace`): its
        calls' spans go under its node's span. None when tracing is off."""
        return None if self.observer is None else self.observer.attempt_context(execution)

    def first_token(
        self, execution: Execution, attempt: int, target: str | None
    ) -> ev.NodeFirstToken:
        started = execution.attempt_started.get(attempt, execution.started)
        ttft = round(self._clock() - started, 6)
        if self.observer is not None:
            self.observer.first_token(execution, attempt, target, ttft)
        return ev.NodeFirstToken(
            attempt=attempt,
            target=target,
            ttft=ttft,
            **self._node(execution),
            **self._common(),
        )

    def text(self, frame: Frame, piece: Piece) -> list[ev.TextChunk]:
        """A piece a response node streams; it is part of the answer. With secrets
        to keep out, the end of a streamed piece may wait for the next one (a
        secret cut in two by a chunk boundary is masked whole): `flush_text`."""
        key = (piece.response_id, piece.source, piece.attempt)
        # The response moved on to another source or attempt: what it held goes first.
        out = [
            chunk
            for held in self._streams.holding()
            if held[0] == key[0] and held != key
            for chunk in self._flush(held)
        ]
        text = self._streams.feed(key, piece.text)
        self._pending[key] = (frame, piece)
        if text:
            out.append(self._chunk(frame, piece, text))
        return out

    def flush_text(self, node_id: str | None = None) -> list[ev.TextChunk]:
        """What the streams of `node_id` (as the response node or its source) held
        back, once it is done or retried; every stream's, with None (the run's end)."""
        return [
            chunk
            for key in self._streams.holding()
            if node_id is None or node_id in key[:2]
            for chunk in self._flush(key)
        ]

    def _flush(self, key: tuple[str, str | None, int | None]) -> list[ev.TextChunk]:
        frame, piece = self._pending.pop(key)
        text = self._streams.flush(key)
        return [self._chunk(frame, piece, text)] if text else []

    def _chunk(self, frame: Frame, piece: Piece, text: str) -> ev.TextChunk:
        self.answer += text
        streamed = piece.attempt is not None and piece.source is not None
        return ev.TextChunk(
            node_id=piece.response_id,
            text=text,
            from_variable_selector=list(piece.selector),
            source_node_id=piece.source,
            attempt=piece.attempt,
            # Unread text is dropped on every retry and swap, so a streamed
            # piece always comes from the source's latest route.
            target=frame.chunk_target.get(piece.source or "") if streamed else None,
            **self._common(),
        )

    def waiting(
        self, execution: Execution, attempt: int, info: WaitInfo, target: str | None
    ) -> ev.NodeWaiting:
        if self.observer is not None:
            self.observer.waiting(execution, attempt, info, target)
        return ev.NodeWaiting(
            attempt=attempt,
            wait_elapsed=info.elapsed_s,
            message=self._redact.text(info.message),
            message_key=info.message_key,
            params=self._redact.value(dict(info.params)),
            target=target,
            **self._node(execution),
            **self._common(),
        )

    def fallback(self, execution: Execution, attempt: int, event: FallbackEvent) -> ev.NodeFallback:
        """A decision of the transport's fallback chain."""
        if self.observer is not None:
            self.observer.fallback(execution, attempt, event)
        return ev.NodeFallback(
            attempt=attempt,
            kind=event.kind,
            reason=event.reason,
            target=event.target,
            message=self._redact.text(event.message),
            message_key=event.message_key,
            params=self._redact.value(dict(event.params)),
            **self._node(execution),
            **self._common(),
        )

    def agent_log(self, execution: Execution, entry: AgentLogEntry) -> ev.AgentLog:
        return ev.AgentLog(
            log_id=entry.id,
            label=entry.label,
            status=entry.status,
            parent_id=entry.parent_id,
            error=None if entry.error is None else self._redact.text(entry.error),
            log_data=self._redact.value(dict(entry.data)),
            metadata=dict(entry.metadata),
            **self._node(execution),
            **self._common(),
        )

    def retry(
        self, execution: Execution, attempt: int, exc: Exception, interval_ms: int
    ) -> ev.NodeRetry:
        partial = exc.partial_text if isinstance(exc, FirstGateError) else ""
        if self.observer is not None:
            self.observer.retry(execution, attempt, exc, interval_ms)
        return ev.NodeRetry(
            attempt=attempt,
            index=execution.index,
            predecessor_node_id=execution.predecessor,
            error_type=error_type(exc),
            error_message=self._redact.text(str(exc)),
            partial_text=self._redact.text(partial),
            retry_interval_ms=interval_ms,
            created_at=execution.created_at,
            finished_at=int(time.time()),
            error=exc,
            **self._node(execution),
            **self._common(),
        )

    # ---- a node execution ends

    def node_ended(
        self, execution: Execution, outcome: Outcome
    ) -> ev.NodeFinished | ev.ContainerCompleted:
        """The node's `node_finished` (a container's `*_completed`); counted, and
        kept for the run's record."""
        metadata: dict[str, Any] = {}
        if outcome.usage:
            metadata.update(self._count_usage(execution, outcome.usage))
        self.retriever_resources.extend(dict(r) for r in outcome.retriever_resources)
        if outcome.strategy:
            metadata["error_strategy"] = outcome.strategy
        if outcome.status is Status.EXCEPTION:
            self.exceptions += 1
        error = outcome.error
        if error is None and outcome.status is Status.CANCELLED:
            error_message: str | None = execution.frame.cancel.reason or "cancelled"
            kind_name: str | None = "StreamCancelledError"
        else:
            error_message = self._redact.text(str(error)) if error is not None else None
            kind_name = error_type(error) if error is not None else None
        common = {
            "inputs": self._value(outcome.inputs),
            "outputs": self._value(outcome.outputs),
            "created_at": execution.created_at,
            "finished_at": int(time.time()),
            "node_elapsed": round(self._clock() - execution.started, 6),
            "error_type": kind_name,
            "error_message": error_message,
            "error": error,
            "index": execution.index,
            "predecessor_node_id": execution.predecessor,
            **self._node(execution),
            **self._common(),
        }
        event: ev.NodeFinished | ev.ContainerCompleted
        if execution.container is not None or execution.node.spec.container is not None:
            event = self._container_ended(execution, outcome, metadata, common)
        else:
            kind = _NODE_END[outcome.status]
            extra = {"strategy": outcome.strategy or ""} if kind is ev.NodeException else {}
            event = kind(
                attempt=outcome.attempt,
                process_data=self._value(outcome.process_data),
                execution_metadata=metadata,
                **extra,
                **common,
            )
        self.records.append(_record(event, execution))
        if self.observer is not None:
            self.observer.node_ended(execution, event)
        return event

    def _count_usage(self, execution: Execution, usage: dict[str, Any]) -> dict[str, Any]:
        tokens = int(usage.get("total_tokens") or 0)
        self.tokens += tokens
        for key in _TOKEN_KEYS:
            self.usage[key] = self.usage.get(key, 0) + int(usage.get(key) or 0)
        owner = execution.frame.owner
        while owner is not None:  # a container counts what its rounds used
            owner.tokens += tokens
            owner = owner.execution.frame.owner
        return {"total_tokens": tokens, "total_price": 0, "currency": "USD"}

    def _container_ended(
        self,
        execution: Execution,
        outcome: Outcome,
        metadata: dict[str, Any],
        common: dict[str, Any],
    ) -> ev.ContainerCompleted:
        container = execution.container
        spec = execution.node.spec.container
        assert spec is not None
        tokens = container.tokens if container is not None else 0
        details = dict(container.run.details) if container is not None else {}
        if container is not None and not common["inputs"]:
            common["inputs"] = self._value(container.inputs)
        return ev.ContainerCompleted(
            kind=spec.kind,
            status=_CONTAINER_END.get(outcome.status, "failed"),
            total_tokens=tokens,
            steps=container.rounds if container is not None else 0,
            execution_metadata={
                "total_tokens": tokens,
                "total_price": 0,
                "currency": "USD",
                **self._value(details),
                **metadata,
            },
            **common,
        )

    # ---- the run ends

    def succeeded(self) -> ev.WorkflowFinished:
        if self.exceptions:
            self.status = "partial-succeeded"
            return ev.WorkflowPartialSucceeded(**self._totals(), **self._common())
        self.status = "succeeded"
        return ev.WorkflowSucceeded(**self._totals(), **self._common())

    def failed(self, error: BaseException) -> ev.WorkflowFailed:
        self.status = "failed"
        return ev.WorkflowFailed(
            error_type=error_type(error),
            error_message=self._redact.text(str(error)),
            error=error,
            **self._totals(),
            **self._common(),
        )

    def stopped(self, reason: str) -> ev.WorkflowStopped:
        self.status = "stopped"
        return ev.WorkflowStopped(
            reason=reason, error_message=reason, **self._totals(), **self._common()
        )

    def summary(self, terminal: ev.WorkflowFinished) -> RunSummary:
        """What the session records of the run that ends with `terminal`."""
        return self.progress(terminal.status, terminal.error_message)

    def progress(self, status: str, error: str | None = None) -> RunSummary:
        """What the session records of the run so far, in `status`."""
        return RunSummary(
            status=status,
            inputs=self.inputs,
            outputs=self.outputs,
            error=error,
            elapsed_time=self._elapsed(),
            total_tokens=self.tokens,
            total_steps=self.steps,
            exceptions_count=self.exceptions,
            nodes=self.records,
            answer=self.answer,
            conversation=self.written,
        )

    def ended(
        self, terminal: ev.WorkflowFinished, record: Callable[[RunSummary], None]
    ) -> Iterator[ev.Event]:
        """Record the run (`record`, the session's), then its end (and the chat turn's).
        A run that cannot be recorded has failed."""
        held = self.flush_text()  # the answer's last characters, before it is recorded
        try:
            record(self.summary(terminal))
        except Exception as exc:  # noqa: BLE001 - reported as the run's failure
            if terminal.status != "failed":
                terminal = self.failed(exc)
        if self.observer is not None:
            self.observer.run_ended(terminal)
        yield from held
        yield terminal
        if not self.info.chat:
            return
        if isinstance(terminal, ev.WorkflowFailed):
            yield ev.ErrorEvent(message=f"Run failed: {terminal.error_message}", **self._common())
        else:
            usage = ev.llm_usage(self.usage, latency=self._elapsed())
            resources = _positioned(self.retriever_resources) if self._show_resources else []
            yield ev.MessageEnd(
                answer=self.answer, usage=usage, retriever_resources=resources, **self._common()
            )

    # ---- pauses and checkpoints

    def resumed(self) -> ev.WorkflowStarted:
        """A resumed run's first event: its clock goes on from where it stopped."""
        if self.observer is not None:
            self.observer.run_started()
        return ev.WorkflowStarted(
            inputs=self._value(self.inputs), reason="resumption", **self._common()
        )

    def announced(self, execution: Execution, notice: NodeNotice) -> ev.NodeAnnounced:
        """An event a node asked for (`NodeNotice`), redacted as every event is."""
        return ev.NodeAnnounced(
            event=notice.name,
            fields=self._value(dict(notice.data)),
            **self._node(execution),
            **self._common(),
        )

    def paused(self, pauses: list[Pause]) -> ev.WorkflowPaused:
        self.status = "paused"
        event = ev.WorkflowPaused(
            paused_nodes=[p.node_id for p in pauses],
            reasons=[self._value(dict(p.reason)) for p in pauses],
            outputs=self._value(self.outputs),
            total_tokens=self.tokens,
            total_steps=self.steps,
            **self._common(),
        )
        if self.observer is not None:  # this process's part of the run ends here
            self.observer.run_ended(event)  # type: ignore[arg-type] - status, totals, outputs
        return event

    def state(self) -> dict[str, Any]:
        """The totals so far, for a checkpoint (`restore` takes them back)."""
        return {
            "elapsed": self._elapsed(),
            "outputs": self.outputs,
            "answer": self.answer,
            "steps": self.steps,
            "exceptions": self.exceptions,
            "tokens": self.tokens,
            "usage": dict(self.usage),
            "written": dict(self.written),
            "retriever_resources": list(self.retriever_resources),
        }

    def restore(self, state: dict[str, Any]) -> None:
        self._t0 = self._clock() - float(state["elapsed"])
        self.outputs = dict(state["outputs"])
        self.answer = str(state["answer"])
        self.steps = int(state["steps"])
        self.exceptions = int(state["exceptions"])
        self.tokens = int(state["tokens"])
        self.usage = {str(k): int(v) for k, v in state["usage"].items()}
        self.written = dict(state["written"])
        self.retriever_resources = list(state["retriever_resources"])

    # ---- shared parts

    def _totals(self) -> dict[str, Any]:
        return {
            "outputs": self._value(self.outputs),
            "total_tokens": self.tokens,
            "total_steps": self.steps,
            "exceptions_count": self.exceptions,
            "finished_at": int(time.time()),
        }

    def _elapsed(self) -> float:
        return round(self._clock() - self._t0, 6)

    def _common(self) -> dict[str, Any]:
        return {"run": self.info, "elapsed": self._elapsed()}

    def _value(self, value: Any) -> Any:
        return self._redact.value(jsonable(value))

    @staticmethod
    def _node(execution: Execution) -> dict[str, Any]:
        """What every event of a node execution says about it (made once)."""
        fields = execution.fields
        if fields is None:
            node = execution.node
            fields = execution.fields = {
                "node_id": node.id,
                "node_type": node.type,
                "title": node.title,
                "execution_id": execution.id,
                "container": execution.frame.place,
            }
        return fields


def _positioned(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The resources of every model call, numbered 1.. in the order they were used."""
    return [{**r, "position": i} for i, r in enumerate(resources, start=1)]


def _record(
    event: ev.NodeFinished | ev.ContainerCompleted, execution: Execution
) -> NodeExecutionRecord:
    process_data = event.process_data if isinstance(event, ev.NodeFinished) else {}
    metadata = event.execution_metadata
    if event.container is not None:
        metadata = {**metadata, **event.container.metadata()}
    return NodeExecutionRecord(
        id=execution.id,
        index=event.index,
        node_id=event.node_id,
        node_type=event.node_type,
        title=event.title,
        predecessor_node_id=event.predecessor_node_id,
        status=event.status,
        inputs=event.inputs,
        process_data=process_data,
        outputs=event.outputs,
        error=event.error_message,
        elapsed_time=event.node_elapsed,
        execution_metadata=metadata,
        created_at=event.created_at,
        finished_at=event.finished_at,
    )
