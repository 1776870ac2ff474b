"""The transport side of the routes: one client and probe per route, the fallback
plan of each provider, and the embedded llama-server when a route needs it."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from contextlib import ExitStack

import httpx
from firstgate.plugin_daemon_client import LLMClient
from firstgate.plugin_daemon_client.fallback import (
    DEFAULT_BREAKER_COOLDOWN_S,
    FallbackEvent,
    FallbackPolicy,
)
from firstgate.plugin_daemon_client.plan import RoutePlan, RouteTarget
from firstgate.plugin_daemon_client.probes import DEFAULT_PROBE_TIMEOUT_S, make_probe
from firstgate.plugin_daemon_client.protocols import OpenAICompatible
from firstgate.runtime.models.breakers import RouteBreakers, shared_breakers
from firstgate.runtime.models.routes import ModelRoutes
from firstgate.runtime.settings.providers import LOCAL, ProviderRoute

log = logging.getLogger(__name__)


class RouteClients:
    """Transport clients, probes and fallback plans per route, built on first use;
    owns the local server if it starts one."""

    def __init__(self, routes: ModelRoutes, *, max_connections: int | None = None) -> None:
        self.routes = routes
        # Connections per route (a stream holds one); None: the transport's default.
        self._limits = (
            httpx.Limits(max_connections=max_connections, max_keepalive_connections=64)
            if max_connections
            else None
        )
        self._lock = threading.Lock()
        self._targets: dict[str, RouteTarget] = {}
        self._policies: dict[str, FallbackPolicy] = {}
        self._warned: set[str] = set()
        self._stack = ExitStack()
        self._local_base_url: str | None = None

    def needs_local(self, providers: Iterable[str]) -> bool:
        return any(route.kind == LOCAL for p in providers for _, route in self.routes.chain_for(p))

    def start_local(self) -> str:
        """Start (or find) the embedded llama-server; idempotent."""
        with self._lock:
            return self._start_local_locked()

    def _start_local_locked(self) -> str:
        if self._local_base_url is None:
            from firstgate.runtime.models.local_server import local_server

            server = self._stack.enter_context(local_server())
            self._local_base_url = server.base_url
        return self._local_base_url

    def plan_for(self, provider: str) -> RoutePlan:
        """The provider's route and its fallbacks, each with its client and probe.

        The fallback policy is built once per route; its configuration warnings
        are handed out with the first plan only, so a run shows them once.
        """
        chain = self.routes.chain_for(provider)
        name, route = chain[0]
        with self._lock:
            targets = [self._target_locked(n) for n, _ in chain]
            if len(targets) == 1:
                return RoutePlan(targets[0])
            policy = self._policies.get(name)
            if policy is None:
                policy = self._policies[name] = FallbackPolicy.build(
                    [t.name for t in targets],
                    swap_attempt_timeout_ms=route.swap_attempt_timeout_ms,
                    swap_attempt_timeout_ms_by_target=route.swap_attempt_timeout_ms_by_target,
                    swap_attempt_timeout_ms_max=route.swap_attempt_timeout_ms_max,
                    swap_total_budget_ms=route.swap_total_budget_ms,
                )
            warnings: tuple[FallbackEvent, ...] = ()
            if name not in self._warned:
                self._warned.add(name)
                warnings = policy.warnings
                for warning in warnings:
                    log.warning("%s", warning.message)
        settings = self.routes.settings.breaker
        breakers = RouteBreakers(
            shared_breakers(settings.threshold, settings.cooldown_s or DEFAULT_BREAKER_COOLDOWN_S),
            {n: self._identity(n, r) for n, r in chain},
        )
        return RoutePlan(
            targets[0],
            tuple(targets[1:]),
            # The warnings travel with the plan; the chain must not repeat them.
            policy=FallbackPolicy(
                caps_ms=policy.caps_ms,
                cap_max_ms=policy.cap_max_ms,
                total_budget_ms=policy.total_budget_ms,
                floor_ms=policy.floor_ms,
            ),
            breakers=breakers,
            warnings=warnings,
        )

    def _identity(self, name: str, route: ProviderRoute) -> str:
        base_url = self._local_base_url if route.kind == LOCAL else route.base_url
        return "|".join(
            (name, route.kind, base_url or "", route.tenant_id or "", route.plugin_id or "")
        )

    def _target_locked(self, name: str) -> RouteTarget:
        target = self._targets.get(name)
        if target is None:
            target = self._targets[name] = self._build_target(name, self.routes.named(name))
        return target

    def _build_target(self, name: str, route: ProviderRoute) -> RouteTarget:
        api_key = os.environ.get(route.api_key_env) if route.api_key_env else None
        reply_cap = {"max_reply_bytes": route.max_reply_bytes} if route.max_reply_bytes else {}
        if route.kind == LOCAL:
            base_url = self._start_local_locked()
            client = LLMClient(OpenAICompatible.kind, base_url, limits=self._limits, **reply_cap)
        else:
            assert route.base_url is not None  # the model validator requires it
            base_url = route.base_url
            client = LLMClient(
                route.kind,
                base_url,
                api_key,
                route.tenant_id,
                route.plugin_id,
                limits=self._limits,
                **reply_cap,
            )
        self._stack.callback(client.close)
        # The probe gets the key only to send it to the route's own origin.
        probe = make_probe(
            route.probe_kind,
            base_url,
            api_key,
            timeout=route.probe_timeout_s or DEFAULT_PROBE_TIMEOUT_S,
        )
        return RouteTarget(
            name=name,
            client=client,
            base_url=base_url,
            probe=probe,
            budget_settings=route.budget_settings(),
            allow_same_host_fallback=route.allow_same_host_fallback,
            json_schema=route.takes_json_schema,
            **({"max_prompt_bytes": route.max_prompt_bytes} if route.max_prompt_bytes else {}),
        )

    def close(self) -> None:
        self._stack.close()
