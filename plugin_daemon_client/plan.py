"""Where a model call may go: a route and the fallback targets behind it.

The runtime builds these from its settings file (`runtime/models/route_clients.py`);
an embedder can hand in plain clients instead (`ClientProvider`). The invoke
path (`invoke.py`) walks them; nodes only name a provider.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .fallback import BreakerBook, FallbackEvent, FallbackPolicy
    from .gate import Probe


class LLMClientLike(Protocol):
    """What a target's client does: `LLMClient.invoke_llm`. The invoke path
    passes `tools`, `tool_choice`, `response_format` and `stream` only when a
    request uses them, so a client that knows only plain chat still serves
    plain chat."""

    def invoke_llm(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        parameters: dict[str, Any],
        stop: list[str] | None = None,
    ) -> Iterator[Any]: ...


class ClientProvider(Protocol):
    def client_for(self, provider: str) -> LLMClientLike:
        """The transport client for a DSL `model.provider` name."""
        ...


# An LLM prompt's bound per route unless its settings say otherwise: room for
# today's million-token context windows, checked while the prompt is built.
DEFAULT_MAX_PROMPT_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RouteTarget:
    """One model route as a model call sees it: where to send, how to watch it."""

    name: str
    client: LLMClientLike
    base_url: str | None = None
    probe: Probe | None = None
    # The route's `first_token_*` settings (settings file), for the budget resolver.
    budget_settings: Mapping[str, Any] = field(default_factory=dict)
    allow_same_host_fallback: bool = False
    # The server takes a JSON schema as the response format (llama-server turns
    # it into a grammar); otherwise the schema goes into the prompt.
    json_schema: bool = True
    # The largest LLM prompt (UTF-8 bytes of its text) a node builds for this route.
    max_prompt_bytes: int = DEFAULT_MAX_PROMPT_BYTES


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


# What serves a run's model calls: the runtime's routes, or an embedder's own clients.
Clients = ClientProvider | RoutePlanner


def plan_for(clients: Clients, provider: str) -> RoutePlan:
    """The route plan for `provider`; a plain client provider gets a single target
    with no probe and no route settings (the budget formula still applies)."""
    if isinstance(clients, RoutePlanner):
        return clients.plan_for(provider)
    return RoutePlan(RouteTarget(provider, clients.client_for(provider)))
