"""The typed events a workflow run yields, in order."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    name: ClassVar[str] = "event"
    elapsed: float  # seconds since the run started

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON: the exception object itself stays out."""
        data: dict[str, Any] = {"event": self.name}
        for f in fields(self):
            if f.name != "error":
                data[f.name] = getattr(self, f.name)
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowStarted(Event):
    name: ClassVar[str] = "workflow_started"
    run_id: str
    inputs: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeEvent(Event):
    node_id: str
    node_type: str
    title: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeStarted(NodeEvent):
    name: ClassVar[str] = "node_started"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeChunk(NodeEvent):
    """An LLM text delta. Chunks of an attempt that later failed are superseded,
    and so are chunks of a fallback target that failed: `target` names the model
    route that produced the text (a `node_fallback` swap supersedes it)."""

    name: ClassVar[str] = "node_chunk"
    attempt: int
    text: str
    target: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerChunk(NodeEvent):
    """Text of an answer (or end) node, streamed as its parts become available.

    `from_node_id`/`attempt` name the LLM attempt the text came from, if any.
    """

    name: ClassVar[str] = "answer_chunk"
    text: str
    from_node_id: str | None = None
    attempt: int | None = None
    target: str | None = None  # the model route the text came from, if known


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeWaiting(NodeEvent):
    """The gate reported the model server is still working on the first token."""

    name: ClassVar[str] = "node_waiting"
    attempt: int
    wait_elapsed: float
    message: str
    message_key: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    target: str | None = None  # the model route being waited for


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFallback(NodeEvent):
    """A fallback chain decided something: `kind` is one of `config_warning`,
    `cap` (an attempt starts, with its cap), `cap_fired`, `swap`, `breaker_skip`,
    `same_host_skip`, `budget_stop`; `reason` says why in a stable word;
    `target` is the route concerned. After a `swap`, chunks of the failed target
    in this attempt are superseded."""

    name: ClassVar[str] = "node_fallback"
    attempt: int
    kind: str
    reason: str
    target: str | None
    message: str
    message_key: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRetry(NodeEvent):
    name: ClassVar[str] = "node_retry"
    attempt: int  # the attempt that failed; the next one is attempt + 1
    error_type: str
    error_message: str
    partial_text: str
    retry_interval_ms: int
    error: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSucceeded(NodeEvent):
    name: ClassVar[str] = "node_succeeded"
    attempt: int
    outputs: dict[str, Any]
    # How the node did it, e.g. an LLM node's resolved first-token budget and route.
    process_data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeException(NodeEvent):
    """The node failed and its error strategy handled it; the run goes on."""

    name: ClassVar[str] = "node_exception"
    attempt: int
    strategy: str
    error_type: str
    error_message: str
    outputs: dict[str, Any]
    error: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFailed(NodeEvent):
    name: ClassVar[str] = "node_failed"
    attempt: int
    error_type: str
    error_message: str
    error: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowSucceeded(Event):
    name: ClassVar[str] = "workflow_succeeded"
    outputs: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowPartialSucceeded(Event):
    name: ClassVar[str] = "workflow_partial_succeeded"
    outputs: dict[str, Any]
    exceptions_count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowFailed(Event):
    name: ClassVar[str] = "workflow_failed"
    error_type: str
    error_message: str
    outputs: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowAborted(Event):
    name: ClassVar[str] = "workflow_aborted"
    reason: str
    outputs: dict[str, Any] = field(default_factory=dict)


TERMINAL_EVENTS = (WorkflowSucceeded, WorkflowPartialSucceeded, WorkflowFailed, WorkflowAborted)
