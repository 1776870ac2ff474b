"""What every node gets from the engine, and what it gives back.

Nodes see only these types: the engine satisfies them, so nodes never import it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from firstgate.common.cancel import CancelToken
from firstgate.common.files import File
from firstgate.locales.localized_error import LocalizedError
from firstgate.nodes.selectors import Selector

# What nodes see of the routes (re-exported: the client layer owns them).
from firstgate.plugin_daemon_client.plan import ClientProvider as ClientProvider
from firstgate.plugin_daemon_client.plan import Clients as Clients
from firstgate.plugin_daemon_client.plan import RoutePlan as RoutePlan
from firstgate.plugin_daemon_client.plan import RoutePlanner as RoutePlanner
from firstgate.plugin_daemon_client.plan import RouteTarget as RouteTarget
from firstgate.plugin_daemon_client.plan import plan_for as plan_for

if TYPE_CHECKING:
    from firstgate.connectors.hub import Connectors
    from firstgate.plugin_daemon_client.fallback import FallbackEvent
    from firstgate.plugin_daemon_client.gate import WaitInfo
    from firstgate.sandbox.executor import CodeExecutor


class Role(StrEnum):
    """What a node is to the engine; the engine asks this, never the type name."""

    ROOT = "root"  # where a run starts (start)
    RESPONSE = "response"  # streams a template to the caller while the run goes (answer, end)
    BRANCH = "branch"  # chooses which of its outgoing edges run (if-else)
    PLAIN = "plain"  # everything else: runs, then takes its success edges
    CONTAINER = "container"  # runs a graph of its own, round by round (iteration, loop)
    # Where a container's round starts (iteration-start, loop-start): runs no
    # code and reports no events; the round's first nodes follow it.
    ROUND_START = "round-start"


@dataclass(frozen=True, slots=True)
class Needs:
    """What a node needs from the runtime, declared from its data."""

    # DSL `model.provider` names it calls (the runtime checks their routes first).
    model_providers: frozenset[str] = frozenset()
    # Its outputs that arrive chunk by chunk while it runs (`ctx.emit_chunk`).
    streams: frozenset[str] = frozenset()
    # Variables outside its own outputs it writes (conversation variables):
    # an answer that reads one waits for this node.
    writes: frozenset[Selector] = frozenset()
    # It runs code through `ctx.code_executor` (the runtime starts the executor
    # with the run, ahead of the node).
    code_executor: bool = False
    # What it hands to a plugin through the plugin daemon (named in messages): the
    # runtime refuses the run before it starts when the settings name no daemon.
    plugin: str = ""
    # JSON schemas it hands a model as the answer's format: the loader asks each
    # route's protocol whether it can express them (not compared or hashed).
    json_schemas: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)


NO_NEEDS = Needs()

# In a node's `output_names`: it may also set outputs not known at load time
# (a plugin tool's variables), so selectors into it are checked when it runs.
ANY_OUTPUT = "*"

# Edge handles. Success edges are `source`; Dify's older exports say `success-branch`.
SUCCESS_HANDLE = "source"
LEGACY_SUCCESS_HANDLE = "success-branch"
FAIL_HANDLE = "fail-branch"


class VariableReader(Protocol):
    def get(self, selector: Selector) -> Any:
        """The value at `selector`, or None when it was never set."""
        ...


class ChunkSink(Protocol):
    def __call__(self, text: str, target: str | None = None) -> None: ...


class WaitSink(Protocol):
    def __call__(self, info: WaitInfo, target: str | None = None) -> None: ...


def _ignore_chunk(text: str, target: str | None = None) -> None:
    return None


def _ignore_wait(info: WaitInfo, target: str | None = None) -> None:
    return None


def _ignore_event(event: FallbackEvent) -> None:
    return None


@dataclass(frozen=True, slots=True)
class AgentLogEntry:
    """One step of an agent's work (Dify's `agent_log`): a round, a model's
    thought in it, a tool call. A step is reported when it starts and again,
    with the same `id`, when it ends (`status` "success" or "error")."""

    id: str
    label: str
    status: str  # "start", "success", "error"
    parent_id: str | None = None
    error: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)


def _ignore_agent_log(entry: AgentLogEntry) -> None:
    return None


class NodeRunError(LocalizedError):
    """A node failed for a reason of its own (not the transport's)."""


class NeedsWorker(Exception):  # noqa: N818 - a request, not an error
    """Raised by a node run on the dispatcher (`ctx.on_dispatcher`) when this
    run turns out to need more than a moment (a template for the sandbox, a
    render past the dispatcher's budget): the engine runs it again on a worker.
    Raised before the node has any effect, so running it again is safe."""


@dataclass(slots=True)
class NodeContext:
    """Everything one node attempt may use."""

    node_id: str
    attempt: int
    variables: VariableReader
    cancel: CancelToken
    # `target` names the model route that produced the text or the wait (a
    # fallback chain tries several per attempt), None when unknown.
    emit_chunk: ChunkSink = _ignore_chunk
    emit_wait: WaitSink = _ignore_wait
    # Swaps, caps, skips and budget stops of a fallback chain.
    emit_fallback: Callable[[FallbackEvent], None] = _ignore_event
    # An agent's rounds and tool calls (Dify's `agent_log` events).
    emit_agent_log: Callable[[AgentLogEntry], None] = _ignore_agent_log
    clients: Clients | None = None
    inputs: Mapping[str, Any] = field(default_factory=dict)
    # Runs untrusted code and templates that need a process of their own.
    code_executor: CodeExecutor | None = None
    # HTTP, knowledge and tool clients, built by the runtime from its settings file.
    connectors: Connectors | None = None
    # The conversation's earlier turns, oldest first (chatflows only).
    history: Sequence[ChatTurn] = ()
    # Runs on the engine's dispatcher, not a worker: it must not block (raise
    # `NeedsWorker` to be run on a worker instead).
    on_dispatcher: bool = False
    # The tracing context the attempt runs in (its node's span; opaque here, None
    # when tracing is off): the engine makes it current around `run`.
    trace: Any = None


def system_outputs(ctx: NodeContext) -> dict[str, Any]:
    """The run's `sys.*` values as outputs named `sys.<name>`: Dify's trigger nodes
    copy them so (`sys.user_id`, `sys.app_id`, `sys.workflow_id`,
    `sys.workflow_run_id`, `sys.files`), and the node's record shows them."""
    system = ctx.variables.get(("sys",))
    if not isinstance(system, Mapping):
        return {}
    return {f"sys.{name}": value for name, value in system.items()}


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """An earlier turn of the conversation (an LLM node's memory reads these).
    An agent app's memory also replays the turn's agent rounds (`thoughts`, as
    the agent node kept them) and the images its user sent (`files`)."""

    query: str
    answer: str
    thoughts: tuple[Mapping[str, Any], ...] = ()
    files: tuple[File, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeNotice:
    """An event a node asks the engine to emit in its name (Dify's wire name and
    `data`, e.g. `human_input_required`): nodes never build the engine's events."""

    name: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Pause:
    """A node's run ends without finishing: the run pauses at this node.

    `payload` (JSON-serialisable) is kept in the run's checkpoint and comes back
    to whoever resumes the run; `reason` is the node's entry in `workflow_paused`'s
    `reasons`; `events` go out first (after the checkpoint is written)."""

    node_id: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    reason: Mapping[str, Any] = field(default_factory=dict)
    events: tuple[NodeNotice, ...] = ()


@dataclass(slots=True)
class NodeResult:
    """Outputs plus which outgoing edge handles to follow (None: the success edges)."""

    outputs: dict[str, Any] = field(default_factory=dict)
    handles: frozenset[str] | None = None
    # What the node read (Dify's node `inputs`), for events and the store.
    inputs: Mapping[str, Any] | None = None
    # How the node did it (Dify's process_data): e.g. the LLM node's resolved
    # first-token budget and which route answered. Not a variable.
    process_data: Mapping[str, Any] | None = None
    # Tokens a model call used (`prompt_tokens`, `completion_tokens`, `total_tokens`).
    usage: Mapping[str, Any] | None = None
    # Variables outside the node's outputs to set, applied when it succeeds
    # (an assigner's conversation and loop variables).
    updates: Mapping[Selector, Any] = field(default_factory=dict)
    # Ends the enclosing loop after this round (loop-end).
    breaks: bool = False
    # The knowledge the node answered from (`message_end`'s retriever resources).
    retriever_resources: tuple[Mapping[str, Any], ...] = ()
    # The run pauses here instead (`Pause`): the node has not finished, and the
    # other fields are ignored.
    pause: Pause | None = None


# ---- containers (iteration, loop): what they tell the engine, round by round


@dataclass(frozen=True, slots=True)
class Round:
    """A round a container asks the engine to run: its index, and the values its
    nodes read under the container's id (an iteration's `item` and `index`)."""

    index: int
    values: Mapping[str, Any] = field(default_factory=dict)
    # What the round's `*_next` event reports: the previous round's output.
    previous_output: Any = None
    # Whether a `*_next` event announces it (Dify announces every round of an
    # iteration, and a loop's rounds after the first).
    announced: bool = True


@dataclass(frozen=True, slots=True)
class RoundDone:
    """A finished round: its variables (its nodes' outputs, the container's
    values, everything outside), the error that failed it, whether a node in it
    ended the loop (`NodeResult.breaks`), and how long it took."""

    index: int
    variables: VariableReader
    error: BaseException | None = None
    broke: bool = False
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class Rounds:
    """A container's decision: rounds to start now; `stop` cancels the rounds
    still running (the container then ends, with `result()`)."""

    start: Sequence[Round] = ()
    stop: bool = False


class ContainerRun(Protocol):
    """One execution of a container node, driven by the engine on its dispatcher.

    The engine calls `first` once, `after` when each round ends, and `result`
    when no round runs and none was asked for (it raises for a failed
    container); a run resumed from a checkpoint calls `resumed` instead of
    `first`, with what `saved` gave. `variables` are values under the
    container's id for all its rounds (a loop's variables, which its nodes may
    write; `variable_types` says their declared types)."""

    inputs: Mapping[str, Any]  # the `*_started` event's inputs
    metadata: Mapping[str, Any]  # the `*_started` event's metadata
    variables: Mapping[str, Any]
    variable_types: Mapping[str, str]
    # The `*_completed` event's execution metadata so far (durations by round, ...).
    details: Mapping[str, Any]
    # Whether its rounds run several at once (a parallel iteration): a pause
    # inside such a round is refused (several rounds would wait on one node).
    parallel: bool

    def first(self, variables: VariableReader) -> Rounds: ...

    def after(self, done: RoundDone) -> Rounds: ...

    def result(self) -> NodeResult: ...

    def saved(self) -> dict[str, Any]:
        """What its finished rounds made (for a checkpoint): `resumed` takes it back."""
        ...

    def resumed(self, saved: Mapping[str, Any], running: Collection[int]) -> Rounds:
        """Go on from `saved()` (in another process): `running` are the rounds
        still in flight (the engine resumes them); the rounds to start now."""
        ...


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """What a container node module declares (`NodeSpec(container=ContainerSpec(...))`)."""

    # Dify's name for its events (`iteration_started`, `loop_next`, ...) and for
    # the `<kind>_id` / `<kind>_index` fields of the events of its nodes.
    kind: str
    # Starts one execution (reads its inputs; raises NodeRunError when they are wrong).
    start: Callable[[Any, NodeContext], ContainerRun]
    # The id of the node its rounds start at (Dify's `start_node_id`).
    round_root: Callable[[Any], str]
    # Names its rounds' nodes read under the container's id (`item`, `index`,
    # loop variables); the names the rest of the graph reads are `output_names`.
    inner_names: Callable[[Any], set[str]]
    # Of those, the ones its nodes may write (loop variables).
    writable: Callable[[Any], set[str]]
    # Selectors the container reads at the end of each round (an iteration's
    # output selector, a loop's break conditions).
    round_selectors: Callable[[Any], list[Selector]]
