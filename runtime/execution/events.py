"""The typed events a run yields, in order, and their wire form.

`to_dict()` is Dify's streaming-API event, field for field, so that whatever
reads Dify's stream reads ours: `workflow_started`, `node_started`,
`node_finished` (status `succeeded` / `failed` / `exception` / `stopped`),
`node_retry`, `text_chunk` (a workflow's output text) or `message` (a
chatflow's answer text), `workflow_finished` (status `succeeded` /
`partial-succeeded` / `failed` / `stopped`), and for chatflows `message_end`
and, when a turn fails, `error`. Every event carries Dify's envelope: `event`,
`task_id`, `workflow_run_id`, and in a chatflow `conversation_id`,
`message_id` and `created_at`.

A container (iteration, loop) reports `iteration_started`, `iteration_next`
(before each round), `iteration_completed` (or `loop_*`) instead of
`node_started` / `node_finished`, as Dify does; the events of the nodes in its
rounds carry its id (`iteration_id` or `loop_id`) and, in `node_finished`'s
`execution_metadata`, the round (`iteration_index` or `loop_index`).

firstgate's own events use the same envelope: `node_waiting` (the model
server is busy with the prompt), `node_fallback` (a fallback chain's
decision) and `node_first_token` (an attempt's first content token). Beyond
Dify's fields, `node_finished` and `node_retry` carry `error_type` (the
error's class), and `workflow_finished` too; nothing else is added.

Each text token is in the stream once: in `text_chunk` / `message` when a
response node shows it (the full text is in the LLM's `node_finished`
outputs). Secrets (secret environment variables) are replaced by `******`
in every event, typed attributes included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

CHAT_MODE = "advanced-chat"


@dataclass(frozen=True, slots=True)
class RunInfo:
    """Who and what a run is: shared by all its events (Dify's envelope)."""

    task_id: str
    workflow_run_id: str
    workflow_id: str
    app_id: str
    mode: str
    user_id: str
    created_at: int  # Unix seconds, as Dify's `created_at`
    conversation_id: str | None = None
    message_id: str | None = None

    @property
    def chat(self) -> bool:
        return self.mode == CHAT_MODE

    def envelope(self, name: str) -> dict[str, Any]:
        if self.chat:
            return {
                "event": name,
                "conversation_id": self.conversation_id,
                "message_id": self.message_id,
                "created_at": self.created_at,
                "task_id": self.task_id,
            }
        return {"event": name, "workflow_run_id": self.workflow_run_id, "task_id": self.task_id}


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    name: ClassVar[str] = "event"
    run: RunInfo = field(repr=False, compare=False)
    elapsed: float  # seconds since the run started (typed events only)

    def to_dict(self) -> dict[str, Any]:
        """The wire form: Dify's envelope plus this event's own fields."""
        return {**self.run.envelope(self.wire_name), **self.payload()}

    @property
    def wire_name(self) -> str:
        return self.name

    def payload(self) -> dict[str, Any]:
        return {"workflow_run_id": self.run.workflow_run_id, "data": self.data()}

    def data(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowStarted(Event):
    name: ClassVar[str] = "workflow_started"
    inputs: dict[str, Any]
    # Dify's `reason`: "initial", or "resumption" for a run resumed from its checkpoint.
    reason: str = "initial"

    def data(self) -> dict[str, Any]:
        return {
            "id": self.run.workflow_run_id,
            "workflow_id": self.run.workflow_id,
            "inputs": self.inputs,
            "created_at": self.run.created_at,
            "reason": self.reason,
        }


# Dify's parallel / container fields of node events: firstgate has no parallel
# ids; a node in a container's round says which container (`InContainer`).
_CONTAINER_FIELDS = {
    "parallel_id": None,
    "parallel_start_node_id": None,
    "parent_parallel_id": None,
    "parent_parallel_start_node_id": None,
    "iteration_id": None,
    "loop_id": None,
}


@dataclass(frozen=True, slots=True)
class InContainer:
    """The container round a node execution runs in (the innermost one)."""

    kind: str  # the container's kind: "iteration" or "loop"
    node_id: str  # the container node
    index: int  # the round, from 0

    def ids(self) -> dict[str, Any]:
        """Dify's `<kind>_id` field."""
        return {f"{self.kind}_id": self.node_id}

    def metadata(self) -> dict[str, Any]:
        """Dify's `<kind>_id` and `<kind>_index` execution metadata."""
        return {f"{self.kind}_id": self.node_id, f"{self.kind}_index": self.index}


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeEvent(Event):
    node_id: str
    node_type: str
    title: str = ""
    execution_id: str = ""  # one per node execution (all its attempts): Dify's node event `id`
    container: InContainer | None = None

    def _node(self) -> dict[str, Any]:
        return {
            "id": self.execution_id,
            "node_id": self.node_id,
            "node_type": self.node_type,
            "title": self.title,
        }

    def _container_fields(self) -> dict[str, Any]:
        if self.container is None:
            return _CONTAINER_FIELDS
        return {**_CONTAINER_FIELDS, **self.container.ids()}

    def _metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        if self.container is None:
            return metadata
        return {**metadata, **self.container.metadata()}


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeStarted(NodeEvent):
    name: ClassVar[str] = "node_started"
    index: int  # 1-based order of node executions in the run
    predecessor_node_id: str | None = None
    created_at: int = 0

    def data(self) -> dict[str, Any]:
        return {
            **self._node(),
            "index": self.index,
            "predecessor_node_id": self.predecessor_node_id,
            "inputs": None,
            "created_at": self.created_at,
            "extras": {},
            **self._container_fields(),
            "parallel_run_id": None,
            "agent_strategy": None,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeOwnEvent(NodeEvent):
    """A firstgate event about one node attempt (same envelope as Dify's)."""

    attempt: int
    target: str | None = None  # the model route concerned, if any

    def _own(self) -> dict[str, Any]:
        return {**self._node(), "attempt": self.attempt, "target": self.target}


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFirstToken(NodeOwnEvent):
    """An attempt's first content token arrived (`ttft` seconds after the attempt began)."""

    name: ClassVar[str] = "node_first_token"
    ttft: float

    def data(self) -> dict[str, Any]:
        return {**self._own(), "ttft": self.ttft}


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeWaiting(NodeOwnEvent):
    """The gate reported the model server is still working on the first token."""

    name: ClassVar[str] = "node_waiting"
    wait_elapsed: float
    message: str
    message_key: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    def data(self) -> dict[str, Any]:
        return {
            **self._own(),
            "wait_elapsed": self.wait_elapsed,
            "message": self.message,
            "message_key": self.message_key,
            "params": self.params,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFallback(NodeOwnEvent):
    """A fallback chain decided something: `kind` is one of `config_warning`,
    `cap` (an attempt starts, with its cap), `cap_fired`, `swap`, `breaker_skip`,
    `same_host_skip`, `budget_stop`; `reason` says why in a stable word;
    `target` is the route concerned. After a `swap`, the failed target's text
    not yet shown is dropped."""

    name: ClassVar[str] = "node_fallback"
    kind: str
    reason: str
    message: str
    message_key: str
    params: dict[str, Any] = field(default_factory=dict)

    def data(self) -> dict[str, Any]:
        return {
            **self._own(),
            "kind": self.kind,
            "reason": self.reason,
            "message": self.message,
            "message_key": self.message_key,
            "params": self.params,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentLog(NodeEvent):
    """One step of an agent node's work (Dify's `agent_log`, field for field):
    a round (`ROUND n`), the model's thought in it, a tool call (`CALL name`).
    `log_id` is the step's id (Dify's `id`; the node execution's id is
    `node_execution_id`), `parent_id` the round a step belongs to."""

    name: ClassVar[str] = "agent_log"
    log_id: str
    label: str
    status: str
    parent_id: str | None = None
    error: str | None = None
    log_data: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def data(self) -> dict[str, Any]:
        return {
            "node_execution_id": self.execution_id,
            "id": self.log_id,
            "label": self.label,
            "parent_id": self.parent_id,
            "error": self.error,
            "status": self.status,
            "data": self.log_data,
            "metadata": self.metadata,
            "node_id": self.node_id,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class TextChunk(Event):
    """Text a response node streams: `text_chunk` in a workflow, `message` in a chatflow.

    `node_id` is the response node (answer or end), `from_variable_selector`
    where the text comes from; `source_node_id` / `attempt` / `target` name the
    node attempt and model route that streamed it, when it was streamed.
    """

    name: ClassVar[str] = "text_chunk"
    node_id: str
    text: str
    from_variable_selector: list[str]
    source_node_id: str | None = None
    attempt: int | None = None
    target: str | None = None

    @property
    def wire_name(self) -> str:
        return "message" if self.run.chat else "text_chunk"

    def payload(self) -> dict[str, Any]:
        if self.run.chat:
            return {
                "id": self.run.message_id,
                "answer": self.text,
                "from_variable_selector": self.from_variable_selector,
            }
        return {
            "workflow_run_id": self.run.workflow_run_id,
            "data": {"text": self.text, "from_variable_selector": self.from_variable_selector},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRetry(NodeEvent):
    name: ClassVar[str] = "node_retry"
    attempt: int  # the attempt that failed; the next one is attempt + 1
    index: int = 0
    predecessor_node_id: str | None = None
    error_type: str
    error_message: str
    partial_text: str
    retry_interval_ms: int
    created_at: int = 0
    finished_at: int = 0
    error: BaseException | None = field(default=None, compare=False, repr=False)

    def data(self) -> dict[str, Any]:
        return {
            **self._node(),
            "index": self.index,
            "predecessor_node_id": self.predecessor_node_id,
            "inputs": None,
            "process_data": None,
            "outputs": {"partial_text": self.partial_text} if self.partial_text else None,
            "status": "retry",
            "error": self.error_message,
            "error_type": self.error_type,
            "elapsed_time": self.elapsed,
            "execution_metadata": None,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "files": [],
            **self._container_fields(),
            "retry_index": self.attempt,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFinished(NodeEvent):
    """A node execution ended; `status` says how (Dify's `node_finished`)."""

    name: ClassVar[str] = "node_finished"
    status: ClassVar[str] = ""
    attempt: int
    index: int = 0
    predecessor_node_id: str | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    # How the node did it, e.g. an LLM node's resolved first-token budget and route.
    process_data: dict[str, Any] = field(default_factory=dict)
    execution_metadata: dict[str, Any] = field(default_factory=dict)
    node_elapsed: float = 0.0  # seconds the node ran (Dify's elapsed_time)
    created_at: int = 0
    finished_at: int = 0
    error_type: str | None = None
    error_message: str | None = None
    error: BaseException | None = field(default=None, compare=False, repr=False)

    def data(self) -> dict[str, Any]:
        return {
            **self._node(),
            "index": self.index,
            "predecessor_node_id": self.predecessor_node_id,
            "inputs": self.inputs,
            "process_data": self.process_data,
            "outputs": self.outputs,
            "status": self.status,
            "error": self.error_message,
            "error_type": self.error_type,
            "elapsed_time": self.node_elapsed,
            "execution_metadata": self._metadata(self.execution_metadata),
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "files": [],
            **self._container_fields(),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSucceeded(NodeFinished):
    status: ClassVar[str] = "succeeded"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeException(NodeFinished):
    """The node failed and its error strategy handled it; the run goes on."""

    status: ClassVar[str] = "exception"
    strategy: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFailed(NodeFinished):
    status: ClassVar[str] = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeStopped(NodeFinished):
    """The run was stopped (aborted or a limit) while the node ran."""

    status: ClassVar[str] = "stopped"


# ---- containers (iteration, loop): Dify's `<kind>_started` / `_next` / `_completed`


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerEvent(NodeEvent):
    """Dify names a container's events by its kind, and gives the node id as their `id`."""

    kind: str  # "iteration" or "loop"
    created_at: int = 0

    @property
    def wire_name(self) -> str:
        return f"{self.kind}_{self.name}"

    def _head(self) -> dict[str, Any]:
        return {
            "id": self.node_id,
            "node_id": self.node_id,
            "node_type": self.node_type,
            "title": self.title,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerStarted(ContainerEvent):
    name: ClassVar[str] = "started"
    inputs: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def data(self) -> dict[str, Any]:
        return {
            **self._head(),
            "created_at": self.created_at,
            "extras": {},
            "metadata": self.metadata,
            "inputs": self.inputs,
            "parallel_id": None,
            "parallel_start_node_id": None,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerNext(ContainerEvent):
    """A round starts (`index` from 0); `previous_output` and `duration` (seconds)
    are those of the round that ended just before, if any."""

    name: ClassVar[str] = "next"
    index: int
    previous_output: Any = None
    duration: float | None = None

    def data(self) -> dict[str, Any]:
        return {
            **self._head(),
            "index": self.index,
            "created_at": self.created_at,
            f"pre_{self.kind}_output": self.previous_output,
            "extras": {},
            "parallel_id": None,
            "parallel_start_node_id": None,
            "parallel_mode_run_id": None,
            "duration": self.duration,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerCompleted(ContainerEvent):
    """The container ended: `status` is `succeeded`, `failed` (its error strategy
    may still have handled it: the run goes on) or `stopped`."""

    name: ClassVar[str] = "completed"
    status: str
    index: int = 0  # its node execution's index, for the run's record
    predecessor_node_id: str | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    execution_metadata: dict[str, Any] = field(default_factory=dict)
    node_elapsed: float = 0.0
    total_tokens: int = 0
    steps: int = 0
    finished_at: int = 0
    error_type: str | None = None
    error_message: str | None = None
    error: BaseException | None = field(default=None, compare=False, repr=False)

    def data(self) -> dict[str, Any]:
        return {
            **self._head(),
            "outputs": self.outputs,
            "created_at": self.created_at,
            "extras": {},
            "inputs": self.inputs,
            "status": self.status,
            "error": self.error_message,
            "elapsed_time": self.node_elapsed,
            "total_tokens": self.total_tokens,
            "execution_metadata": self._metadata(self.execution_metadata),
            "finished_at": self.finished_at,
            "steps": self.steps,
            "parallel_id": None,
            "parallel_start_node_id": None,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowFinished(Event):
    name: ClassVar[str] = "workflow_finished"
    status: ClassVar[str] = ""
    outputs: dict[str, Any] = field(default_factory=dict)
    total_tokens: int = 0
    total_steps: int = 0
    exceptions_count: int = 0
    finished_at: int = 0
    error_type: str | None = None
    error_message: str | None = None
    error: BaseException | None = field(default=None, compare=False, repr=False)

    def data(self) -> dict[str, Any]:
        return {
            "id": self.run.workflow_run_id,
            "workflow_id": self.run.workflow_id,
            "status": self.status,
            "outputs": self.outputs,
            "error": self.error_message,
            "error_type": self.error_type,
            "elapsed_time": self.elapsed,
            "total_tokens": self.total_tokens,
            "total_steps": self.total_steps,
            "created_by": {"id": self.run.user_id, "user": self.run.user_id},
            "created_at": self.run.created_at,
            "finished_at": self.finished_at,
            "exceptions_count": self.exceptions_count,
            "files": [],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowSucceeded(WorkflowFinished):
    status: ClassVar[str] = "succeeded"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowPartialSucceeded(WorkflowFinished):
    """Succeeded, with nodes whose errors their strategy handled."""

    status: ClassVar[str] = "partial-succeeded"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowFailed(WorkflowFinished):
    status: ClassVar[str] = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowStopped(WorkflowFinished):
    """Aborted by the caller (or Ctrl-C): `reason` says who or why."""

    status: ClassVar[str] = "stopped"
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeAnnounced(NodeEvent):
    """An event a node asked for in its own name (`nodes.base.NodeNotice`: a
    human-input node's `human_input_required`): its wire name and its data."""

    name: ClassVar[str] = "node_notice"
    event: str
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def wire_name(self) -> str:
        return self.event

    def data(self) -> dict[str, Any]:
        return self.fields


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowPaused(Event):
    """The run paused (a node asked it to: `nodes.base.Pause`): its checkpoint is
    written and nothing of it runs until it is resumed. The stream ends here."""

    name: ClassVar[str] = "workflow_paused"
    status: ClassVar[str] = "paused"
    paused_nodes: list[str] = field(default_factory=list)
    reasons: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    total_tokens: int = 0
    total_steps: int = 0

    def data(self) -> dict[str, Any]:
        return {
            "workflow_run_id": self.run.workflow_run_id,
            "paused_nodes": self.paused_nodes,
            "outputs": self.outputs,
            "reasons": self.reasons,
            "status": self.status,
            "created_at": self.run.created_at,
            "elapsed_time": self.elapsed,
            "total_tokens": self.total_tokens,
            "total_steps": self.total_steps,
        }


def llm_usage(tokens: dict[str, int], *, latency: float) -> dict[str, Any]:
    """Dify's usage metadata (`LLMUsage`), every field: token counts, and prices as
    decimal strings (firstgate knows no prices: "0")."""
    usage: dict[str, Any] = {}
    for side in ("prompt", "completion"):
        usage[f"{side}_tokens"] = int(tokens.get(f"{side}_tokens", 0))
        usage.update({f"{side}_unit_price": "0", f"{side}_price_unit": "0", f"{side}_price": "0"})
    usage.update(
        total_tokens=int(tokens.get("total_tokens", 0)),
        total_price="0",
        currency="USD",
        latency=latency,
    )
    return usage


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageEnd(Event):
    """A chatflow turn's end: the answer is complete (after `workflow_finished`)."""

    name: ClassVar[str] = "message_end"
    answer: str  # the whole streamed answer (typed events only)
    usage: dict[str, Any] = field(default_factory=dict)
    # The knowledge the answer used, when the app shows it (`retriever_resource`).
    retriever_resources: list[dict[str, Any]] = field(default_factory=list)

    def payload(self) -> dict[str, Any]:
        return {
            "id": self.run.message_id,
            "metadata": {"usage": self.usage, "retriever_resources": self.retriever_resources},
            "files": [],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent(Event):
    """A chatflow turn failed (after its `workflow_finished`), as Dify reports it."""

    name: ClassVar[str] = "error"
    message: str
    code: str = "invalid_param"
    status: int = 400

    def payload(self) -> dict[str, Any]:
        return {"status": self.status, "code": self.code, "message": self.message}
