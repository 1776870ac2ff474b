"""What every node gets from the engine, and what it gives back.

Nodes see only these types: the engine satisfies them, so nodes never import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from locales.localized_error import LocalizedError
from nodes.cancel import CancelToken
from nodes.selectors import Selector

# What nodes see of the routes (re-exported: the client layer owns them).
from plugin_daemon_client.plan import ClientProvider as ClientProvider
from plugin_daemon_client.plan import Clients as Clients
from plugin_daemon_client.plan import RoutePlan as RoutePlan
from plugin_daemon_client.plan import RoutePlanner as RoutePlanner
from plugin_daemon_client.plan import RouteTarget as RouteTarget
from plugin_daemon_client.plan import plan_for as plan_for

if TYPE_CHECKING:
    from connectors.hub import Connectors
    from plugin_daemon_client.fallback import FallbackEvent
    from plugin_daemon_client.gate import WaitInfo
    from sandbox.executor import CodeExecutor


class Role(StrEnum):
    """What a node is to the engine; the engine asks this, never the type name."""

    ROOT = "root"  # where a run starts (start)
    RESPONSE = "response"  # streams a template to the caller while the run goes (answer, end)
    BRANCH = "branch"  # chooses which of its outgoing edges run (if-else)
    PLAIN = "plain"  # everything else: runs, then takes its success edges
    CONTAINER = "container"  # runs a graph of its own (iteration, loop: not yet)


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


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """An earlier turn of the conversation (an LLM node's memory reads these)."""

    query: str
    answer: str


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
    # (an assigner's conversation variables).
    updates: Mapping[Selector, Any] = field(default_factory=dict)
