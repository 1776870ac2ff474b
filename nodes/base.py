"""What every node gets from the engine, and what it gives back.

Nodes see only these types: the engine satisfies them, so nodes never import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from locales.localized_error import LocalizedError
from nodes.cancel import CancelToken
from nodes.selectors import Selector

if TYPE_CHECKING:
    from connectors.hub import Connectors
    from plugin_daemon_client.fallback import BreakerBook, FallbackEvent, FallbackPolicy
    from plugin_daemon_client.gate import Probe, WaitInfo
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


class LLMClientLike(Protocol):
    def invoke_llm(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        parameters: dict[str, Any],
        stop: list[str] | None = None,
    ) -> Any: ...


class ClientProvider(Protocol):
    def client_for(self, provider: str) -> LLMClientLike:
        """The transport client for a DSL `model.provider` name."""
        ...


@dataclass(frozen=True, slots=True)
class RouteTarget:
    """One model route as an LLM node sees it: where to send, how to watch it."""

    name: str
    client: LLMClientLike
    base_url: str | None = None
    probe: Probe | None = None
    # The route's `first_token_*` settings (models file), for the budget resolver.
    budget_settings: Mapping[str, Any] = field(default_factory=dict)
    allow_same_host_fallback: bool = False


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """The route of a provider and the fallback targets behind it, in order.

    `warnings` are the fallback configuration warnings, handed out only with the
    first plan of a route (per client provider) so that a run shows them once.
    """

    primary: RouteTarget
    fallbacks: tuple[RouteTarget, ...] = ()
    policy: FallbackPolicy | None = None
    breakers: BreakerBook | None = None
    warnings: tuple[FallbackEvent, ...] = ()

    @property
    def targets(self) -> tuple[RouteTarget, ...]:
        return (self.primary, *self.fallbacks)


@runtime_checkable
class RoutePlanner(Protocol):
    """Knows routes, probes and fallback chains (the runtime's `RouteClients`)."""

    def plan_for(self, provider: str) -> RoutePlan: ...


# What serves a run's LLM nodes: the runtime's routes, or an embedder's own clients.
Clients = ClientProvider | RoutePlanner


def plan_for(clients: Clients, provider: str) -> RoutePlan:
    """The route plan for `provider`; a plain client provider gets a single target
    with no probe and no route settings (the budget formula still applies)."""
    if isinstance(clients, RoutePlanner):
        return clients.plan_for(provider)
    return RoutePlan(RouteTarget(provider, clients.client_for(provider)))


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
