"""Where telemetry hooks into a run: the run report's observer.

`RunReport` (`runtime/execution/run_report.py`) hands every fact it receives
to its `RunTelemetry` (a run started, a node started or ended, a first token,
a wait, a fallback decision, a retry, the run ended), and the observer makes
spans and metrics of them. Nothing in the dispatcher or in the nodes knows
about telemetry; the only other hook is the model-call layer
(`plugin_daemon_client/invoke.py`: a span per target attempt, the gate's
verdicts), whose spans find their node's span through the context each
attempt runs in (`NodeContext.trace`, entered by
`runtime/execution/error_handler.py`).

Spans: the run (a child of the caller's `traceparent` when serve was given
one), a span per node execution under it, a span per container round under
its iteration or loop and that round's nodes under it. Events on a node's
span: first token, waiting (a probe said busy), each fallback decision, each
retry. Content (inputs, outputs) only with `capture_content`, and only as the
report already redacted it.

With tracing off and metrics off `RunTelemetry.start` returns None and the
report skips every call.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from firstgate.common import metrics, telemetry
from firstgate.plugin_daemon_client.errors import StreamTimeoutError

if TYPE_CHECKING:
    from firstgate.plugin_daemon_client.fallback import FallbackEvent
    from firstgate.plugin_daemon_client.gate import WaitInfo
    from firstgate.runtime.execution import events as ev
    from firstgate.runtime.execution.frames import Execution

Span = telemetry.Span

# Content attributes are cut here: a span is not a store.
CONTENT_LIMIT = 8192


class RunTelemetry:
    """Spans and metrics of one run, from the facts its report receives."""

    def __init__(
        self, info: ev.RunInfo, app: str, parent: Span | None, tracing: telemetry.Tracing | None
    ) -> None:
        self.info = info
        self.app = app
        self._tracing = tracing
        self._parent = parent
        self._run: Span | None = None
        self._spans: dict[str, Span] = {}  # execution id -> its span
        self._rounds: dict[tuple[str, int], Span] = {}  # (container execution id, round)
        self._round_end: dict[tuple[str, int], int] = {}  # when its last node ended (ns)
        # Node durations, handed to the metrics in batches (see `metrics.nodes_ended`).
        self._durations: list[tuple[str, float]] = []

    @classmethod
    def start(cls, info: ev.RunInfo, app: str, traceparent: str | None) -> RunTelemetry | None:
        """The run's observer; None when neither tracing nor metrics are on."""
        tracing = telemetry.active()
        if tracing is None and not metrics.enabled():
            return None
        return cls(info, app, telemetry.parent_from_traceparent(traceparent), tracing)

    # ---- the run

    def run_started(self) -> None:
        if self._tracing is None:
            return
        info = self.info
        attributes: dict[str, Any] = {
            "firstgate.app.id": info.app_id,
            "firstgate.app.name": self.app,
            "firstgate.app.mode": info.mode,
            "firstgate.run.id": info.workflow_run_id,
            "firstgate.task.id": info.task_id,
            "firstgate.workflow.id": info.workflow_id,
            "openinference.span.kind": "CHAIN",
        }
        if info.conversation_id:
            attributes["gen_ai.conversation.id"] = info.conversation_id
        self._run = self._tracing.start_span(f"workflow {self.app}", self._parent, attributes)

    def run_ended(self, terminal: ev.WorkflowFinished) -> None:
        metrics.run_ended(self.app, terminal.status, self._durations)
        span = self._run
        if span is None:
            return
        span.set_attribute("firstgate.run.status", terminal.status)
        span.set_attribute("firstgate.run.steps", terminal.total_steps)
        span.set_attribute("firstgate.run.total_tokens", terminal.total_tokens)
        error = getattr(terminal, "error_type", None)
        if terminal.status in ("failed", "stopped"):
            _failed(span, error or terminal.status)
        if self._tracing is not None and self._tracing.capture_content:
            span.set_attribute("output.value", _content(terminal.outputs))
        for round_span in self._rounds.values():  # a stopped run's rounds
            round_span.end()
        self._rounds.clear()
        span.end()
        self._run = None

    # ---- node executions

    def node_started(self, execution: Execution) -> None:
        if self._tracing is None:
            return
        node = execution.node
        attributes: dict[str, Any] = {
            "firstgate.node.id": node.id,
            "firstgate.node.type": node.type,
            "firstgate.node.title": node.title,
            "firstgate.node.execution_id": execution.id,
            "firstgate.node.index": execution.index,
            "openinference.span.kind": "CHAIN",
        }
        place = execution.frame.place
        if place is not None:
            attributes["firstgate.round.index"] = place.index
        self._spans[execution.id] = self._tracing.start_span(
            f"{node.type} {node.title}" if node.title else node.type,
            self._parent_span(execution),
            attributes,
        )

    def attempt_context(self, execution: Execution) -> Span | None:
        """The context a node attempt runs in: its node's span current."""
        return self._spans.get(execution.id)

    def first_token(
        self, execution: Execution, attempt: int, target: str | None, ttft: float
    ) -> None:
        span = self._spans.get(execution.id)
        if span is not None:
            span.add_event(
                "firstgate.first_token",
                {
                    "firstgate.attempt": attempt,
                    "firstgate.route": target or "",
                    "firstgate.ttft_s": ttft,
                },
            )

    def waiting(
        self, execution: Execution, attempt: int, info: WaitInfo, target: str | None
    ) -> None:
        span = self._spans.get(execution.id)
        if span is not None:
            span.add_event(
                "firstgate.waiting",
                {
                    "firstgate.attempt": attempt,
                    "firstgate.route": target or "",
                    "firstgate.wait.elapsed_s": info.elapsed_s,
                    "firstgate.wait.extended_by_s": info.extended_by_s,
                    "firstgate.wait.extensions": info.extensions,
                },
            )

    def fallback(self, execution: Execution, attempt: int, event: FallbackEvent) -> None:
        metrics.fallback(event.kind, event.reason)
        span = self._spans.get(execution.id)
        if span is not None:
            span.add_event(
                f"firstgate.fallback.{event.kind}",
                {
                    "firstgate.attempt": attempt,
                    "firstgate.fallback.kind": event.kind,
                    "firstgate.fallback.reason": event.reason,
                    "firstgate.route": event.target or "",
                },
            )

    def retry(self, execution: Execution, attempt: int, exc: Exception, interval_ms: int) -> None:
        metrics.retry(execution.node.type)
        span = self._spans.get(execution.id)
        if span is not None:
            attributes: dict[str, Any] = {
                "firstgate.attempt": attempt,
                "error.type": type(exc).__name__,
                "firstgate.retry.interval_ms": interval_ms,
            }
            if isinstance(exc, StreamTimeoutError) and exc.deadline is not None:
                attributes["firstgate.gate.cause"] = str(exc.deadline)
            span.add_event("firstgate.retry", attributes)

    def node_ended(
        self, execution: Execution, event: ev.NodeFinished | ev.ContainerCompleted
    ) -> None:
        durations = self._durations
        durations.append((execution.node.type, event.node_elapsed))
        if len(durations) >= metrics.RUN_BATCH:
            metrics.nodes_ended(durations)
        span = self._spans.pop(execution.id, None)
        if span is None:
            return
        attributes = span.attributes  # the span's own dict: written in place
        attributes["firstgate.node.status"] = event.status
        attempt = getattr(event, "attempt", None)
        if attempt is not None:
            attributes["firstgate.node.attempts"] = attempt
        metadata = event.execution_metadata
        tokens = metadata.get("total_tokens")
        if tokens:
            attributes["firstgate.node.total_tokens"] = int(tokens)
        strategy = metadata.get("error_strategy")
        if strategy:
            attributes["firstgate.node.error_strategy"] = strategy
        if event.error_type:
            attributes["error.type"] = event.error_type
        if event.status in ("failed", "stopped"):
            _failed(span, event.error_type or event.status)
        if self._tracing is not None and self._tracing.capture_content:
            span.set_attribute("input.value", _content(event.inputs))
            span.set_attribute("output.value", _content(event.outputs))
        now = time.time_ns()
        place = execution.frame.place
        if place is not None:
            key = (execution.frame.owner.execution.id, place.index)  # type: ignore[union-attr]
            self._round_end[key] = now
        if execution.container is not None or execution.node.spec.container is not None:
            self._end_rounds(execution.id)
        span.end(end_time=now)

    # ---- container rounds

    def _parent_span(self, execution: Execution) -> Span | None:
        frame = execution.frame
        owner = frame.owner
        if owner is None:
            return self._run
        key = (owner.execution.id, frame.index)
        span = self._rounds.get(key)
        if span is None and self._tracing is not None:
            container = self._spans.get(owner.execution.id)
            started = time.time_ns() - int((time.monotonic() - frame.started) * 1e9)
            span = self._rounds[key] = self._tracing.start_span(
                f"{owner.kind} round {frame.index}",
                container,
                {
                    "firstgate.round.kind": owner.kind,
                    "firstgate.round.index": frame.index,
                    "firstgate.node.id": owner.execution.node.id,
                },
                start_time=started,
            )
        return span

    def _end_rounds(self, container_id: str) -> None:
        for key in [k for k in self._rounds if k[0] == container_id]:
            self._rounds.pop(key).end(end_time=self._round_end.pop(key, None))


def _failed(span: Span, cause: str) -> None:
    span.set_error(cause)


def _content(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= CONTENT_LIMIT else text[:CONTENT_LIMIT] + "…"
