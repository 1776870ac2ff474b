"""What every node gets from the engine, and what it gives back.

Nodes see only these types: the engine satisfies them, so nodes never import it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from locales.localized_error import LocalizedError
from nodes.cancel import CancelToken
from nodes.rendering import TextBudget, TextBuilder
from nodes.selectors import Selector, TextSegment, parse_template

if TYPE_CHECKING:
    from connectors.hub import Connectors
    from plugin_daemon_client.fallback import BreakerBook, FallbackEvent, FallbackPolicy
    from plugin_daemon_client.gate import Probe, WaitInfo
    from sandbox.executor import CodeExecutor

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


@dataclass(slots=True)
class NodeResult:
    """Outputs plus which outgoing edge handles to follow (None: the success edges)."""

    outputs: dict[str, Any] = field(default_factory=dict)
    handles: frozenset[str] | None = None
    # How the node did it (Dify's process_data): e.g. the LLM node's resolved
    # first-token budget and which route answered. Not a variable.
    process_data: Mapping[str, Any] | None = None


def to_text(value: Any) -> str:
    """How a variable renders inside a text template (Dify: objects and arrays as JSON)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def render_selectors(
    template: str, variables: VariableReader, budget: TextBudget | None = None
) -> str:
    """Replace every `{{#node.var#}}` with its value; a missing value renders empty.

    The text is capped while it is built (`nodes.rendering`); pass `budget` to
    count several renders against one cap (the messages of one prompt).
    """
    text = TextBuilder(budget)
    for segment in parse_template(template):
        if isinstance(segment, TextSegment):
            text.add(segment.text)
        else:
            text.add(to_text(variables.get(segment.selector)))
    return text.text()
