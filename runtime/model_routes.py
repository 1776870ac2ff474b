"""Where each DSL `model.provider` is served: the models file and the clients it yields.

    providers:
      openai: {kind: openai-compatible, base_url: https://api.example/v1, api_key_env: OPENAI_API_KEY}
      langgenius/ollama/ollama: {kind: plugin-daemon, base_url: http://daemon:5002,
                                 api_key_env: DAEMON_KEY, tenant_id: t1, plugin_id: langgenius/ollama}
      local: {kind: local}
    default: local            # for providers not listed

Credentials come only from the environment variables named by `api_key_env`.
With no models file every provider is served by the embedded llama-server.

Per route, optionally (issue 5):

- first-token budget: `first_token_timeout_s` (a number pins it, 0 disables,
  "auto"/empty: the formula), `first_token_ceiling_s`, and the formula's
  constants `first_token_cold_start_s`, `first_token_base_s`,
  `first_token_per_1k_s` (see `plugin_daemon_client.first_token_budget`);
- liveness probe: `probe: auto | llama.cpp-slots | llama.cpp-metrics | vllm |
  gate | off` (default `auto` for local and openai-compatible routes, `off`
  for plugin-daemon ones) and `probe_timeout_s` (4). A probe asks only the
  route's own origin and sends the route's key only there;
- fallback chain: `fallbacks: [route, ...]` (`fallback` is accepted too),
  tried in order when this route fails with a transient error; the
  fallback routes' own `fallbacks` are not followed (no nesting). Caps:
  `swap_attempt_timeout_ms`, `swap_attempt_timeout_ms_by_target: {route: ms}`,
  the clamp `swap_attempt_timeout_ms_max`, the total `swap_total_budget_ms`;
  `allow_same_host_fallback: true` on a target lets it run on the same busy
  local host as a target that just failed.

Top level, optionally: `breaker: {threshold: 5, cooldown_s: 60}`. Circuit
breakers are shared by every run in the process (a server that is down stays
skipped across runs), keyed by the route's name *and* where it points (kind,
base_url, tenant, plugin), so two models files that reuse a name for
different servers never share a breaker.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from nodes.base import RoutePlan, RouteTarget
from nodes.config import DslModel, bounded_int, choice, dsl_error, shown
from plugin_daemon_client.fallback import (
    DEFAULT_BREAKER_COOLDOWN_S,
    DEFAULT_BREAKER_THRESHOLD,
    CircuitBreakers,
    FallbackEvent,
    FallbackPolicy,
)
from plugin_daemon_client.first_token_budget import ROUTE_KEYS
from plugin_daemon_client.probes import DEFAULT_PROBE_TIMEOUT_S, PROBE_KINDS, make_probe
from runtime.problems import DslError, problems_from_validation
from runtime.yaml_reader import read_yaml_mapping

log = logging.getLogger(__name__)

LOCAL = "local"
PLUGIN_DAEMON = "plugin-daemon"
KINDS = ("openai-compatible", PLUGIN_DAEMON, LOCAL)


# --- setting validators: a wrong value is a located models-file problem -------


def _real(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _budget_seconds(value: Any) -> float | str | None:
    """A first-token setting: a number of seconds >= 0, "auto" or empty."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return value
    number = _real(value)
    if number is None or number < 0:
        raise dsl_error(
            "dsl.models.seconds",
            'must be a number of seconds (0 or more), "auto" or empty, got {got}',
            got=shown(value),
        )
    return number


def _positive_seconds(value: Any) -> float | None:
    if value is None:
        return None
    number = _real(value)
    if number is None or number <= 0:
        raise dsl_error(
            "dsl.models.positiveSeconds",
            "must be a positive number of seconds, got {got}",
            got=shown(value),
        )
    return number


def _milliseconds(value: Any) -> float | None:
    """A fallback setting in ms. Only its type is checked here: values that are
    0 or negative follow the fallback policy's rules (warned, then the next
    level applies), so they are reported at run time with what was used instead."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise dsl_error(
            "dsl.models.milliseconds",
            "must be a number of milliseconds, got {got}",
            got=shown(value),
        )
    return float(value)


def _probe_kind(value: Any) -> str | None:
    if value is None:
        return None
    if value is False:  # YAML `probe: off` without quotes is a boolean
        return "off"
    if value not in PROBE_KINDS:
        raise dsl_error(
            "dsl.choice",
            "must be one of {choices}, got {got}",
            choices=", ".join(PROBE_KINDS),
            got=shown(value),
        )
    return str(value)


BudgetSeconds = Annotated[float | str | None, BeforeValidator(_budget_seconds)]
PositiveSeconds = Annotated[float | None, BeforeValidator(_positive_seconds)]
MillisecondsSetting = Annotated[float | None, BeforeValidator(_milliseconds)]
ProbeKind = Annotated[str | None, BeforeValidator(_probe_kind)]


class ProviderRoute(DslModel):
    kind: choice(*KINDS)  # type: ignore[valid-type]
    base_url: str | None = None
    api_key_env: str | None = None
    tenant_id: str | None = None
    plugin_id: str | None = None
    # First-token budget (plugin_daemon_client.first_token_budget, precedence level 3-4).
    first_token_timeout_s: BudgetSeconds = None
    first_token_ceiling_s: PositiveSeconds = None
    first_token_cold_start_s: BudgetSeconds = None
    first_token_base_s: BudgetSeconds = None
    first_token_per_1k_s: BudgetSeconds = None
    # Liveness probe: None means the kind's default (see `probe_kind`).
    probe: ProbeKind = None
    probe_timeout_s: PositiveSeconds = None
    # Fallback chain.
    fallbacks: list[str] = Field(default_factory=list)
    allow_same_host_fallback: bool = False
    swap_attempt_timeout_ms: MillisecondsSetting = None
    swap_attempt_timeout_ms_by_target: dict[str, MillisecondsSetting] = Field(default_factory=dict)
    swap_attempt_timeout_ms_max: MillisecondsSetting = None
    swap_total_budget_ms: MillisecondsSetting = None

    @model_validator(mode="before")
    @classmethod
    def _fallback_alias(cls, raw: Any) -> Any:
        # `fallback` (singular, or a single name) is accepted; `fallbacks` wins.
        if isinstance(raw, dict) and "fallback" in raw and "fallbacks" not in raw:
            raw = dict(raw)
            value = raw.pop("fallback")
            raw["fallbacks"] = [value] if isinstance(value, str) else value
        return raw

    @model_validator(mode="after")
    def _needs_url(self) -> ProviderRoute:
        if self.kind != LOCAL and not self.base_url:
            raise dsl_error(
                "dsl.models.baseUrl", "base_url is required for kind {kind}", kind=self.kind
            )
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            raise dsl_error(
                "dsl.models.baseUrlScheme",
                "base_url must start with http:// or https://, got {value}",
                value=repr(self.base_url[:80]),
            )
        return self

    @property
    def probe_kind(self) -> str:
        """`auto` where a probe can reach the model server itself; `off` for the
        plugin daemon, whose host is the daemon, not the server doing the work."""
        if self.probe is not None:
            return self.probe
        return "off" if self.kind == PLUGIN_DAEMON else "auto"

    def budget_settings(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in ROUTE_KEYS if getattr(self, key) is not None}


def _fallback_error(
    message_key: str, english: str, key: str, route: str, target: str
) -> PydanticCustomError:
    # Built directly: the message's placeholder is called `key` (the setting's
    # path), which `dsl_error`'s own first parameter would shadow.
    return PydanticCustomError(message_key, english, {"key": key, "route": route, "target": target})


class BreakerSettings(DslModel):
    threshold: bounded_int(1, 1000) = DEFAULT_BREAKER_THRESHOLD  # type: ignore[valid-type]
    cooldown_s: PositiveSeconds = DEFAULT_BREAKER_COOLDOWN_S


class ModelsFile(DslModel):
    providers: dict[str, ProviderRoute] = Field(default_factory=dict)
    default: str | None = None
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)

    @model_validator(mode="after")
    def _default_exists(self) -> ModelsFile:
        if self.default and self.default != LOCAL and self.default not in self.providers:
            raise dsl_error(
                "dsl.models.unknownDefault",
                "default names provider {name}, which is not listed under providers",
                name=self.default,
            )
        return self

    @model_validator(mode="after")
    def _fallbacks_exist(self) -> ModelsFile:
        for name, route in self.providers.items():
            seen: set[str] = set()
            for target in route.fallbacks:
                key = f"providers.{name}.fallbacks"
                if target != LOCAL and target not in self.providers:
                    raise _fallback_error(
                        "dsl.models.unknownFallback",
                        "{key} names {target}, which is not listed under providers",
                        key,
                        name,
                        target,
                    )
                if target == name or target in seen:
                    raise _fallback_error(
                        "dsl.models.repeatedFallback",
                        "{key} lists {target} twice (or the route itself); each route "
                        "may appear once in a chain",
                        key,
                        name,
                        target,
                    )
                seen.add(target)
        return self


class RouteError(Exception):
    """A route cannot be used (missing credentials, no route): invalid input, not a run failure."""

    def __init__(self, message_key: str, english: str, **params: Any) -> None:
        super().__init__(english)
        self.message_key = message_key
        self.params = params


class ModelRoutes:
    """Maps provider names to routes; unknown providers take the default (or `local`)."""

    def __init__(self, models: ModelsFile | None = None) -> None:
        self.models = models or ModelsFile()

    def route_for(self, provider: str) -> tuple[str, ProviderRoute]:
        if provider in self.models.providers:
            return provider, self.models.providers[provider]
        name = self.models.default or LOCAL
        return name, self.named(name)

    def named(self, name: str) -> ProviderRoute:
        """The route called `name` (`local` need not be listed)."""
        return self.models.providers.get(name, ProviderRoute(kind=LOCAL))

    def chain_for(self, provider: str) -> list[tuple[str, ProviderRoute]]:
        """The provider's route, then its fallback routes, in order."""
        name, route = self.route_for(provider)
        return [(name, route), *((f, self.named(f)) for f in route.fallbacks)]

    def check(self, providers: Iterable[str]) -> None:
        """Fail before the run when a needed credential variable is unset
        (fallback routes included: a chain must not break on its second link)."""
        for provider in sorted(set(providers)):
            for name, route in self.chain_for(provider):
                self._check_key(provider, name, route)

    @staticmethod
    def _check_key(provider: str, name: str, route: ProviderRoute) -> None:
        if route.api_key_env and not os.environ.get(route.api_key_env):
            raise RouteError(
                "cli.models.missingKey",
                f"provider {provider!r} (route {name!r}) needs the environment variable "
                f"{route.api_key_env}, which is not set",
                provider=provider,
                route=name,
                env=route.api_key_env,
            )


def load_models(path: str | Path) -> ModelRoutes:
    """Read a models file; every problem is reported through DslError."""
    file = Path(path)
    raw = read_yaml_mapping(file, empty={}, not_mapping="cli.models.notMapping")
    try:
        return ModelRoutes(ModelsFile.model_validate(raw))
    except ValidationError as exc:
        raise DslError(problems_from_validation(exc, prefix=str(file)), source=file) from None


# --- circuit breakers shared by the process ------------------------------------

_SHARED_LOCK = threading.Lock()
_SHARED_BREAKERS: dict[tuple[int, float], CircuitBreakers] = {}


def shared_breakers(threshold: int, cooldown_s: float) -> CircuitBreakers:
    """The process-wide breakers for these settings (one instance per setting pair)."""
    with _SHARED_LOCK:
        key = (threshold, float(cooldown_s))
        breakers = _SHARED_BREAKERS.get(key)
        if breakers is None:
            breakers = _SHARED_BREAKERS[key] = CircuitBreakers(threshold, cooldown_s)
        return breakers


def reset_shared_breakers() -> None:
    """Forget every breaker of this process (tests; an operator's "try again now")."""
    with _SHARED_LOCK:
        _SHARED_BREAKERS.clear()


class RouteBreakers:
    """The walker's breaker book for one chain: target (route) names mapped onto
    keys of the shared breakers that also say where the route points."""

    def __init__(self, shared: CircuitBreakers, keys: Mapping[str, str]) -> None:
        self.shared = shared
        self.keys = dict(keys)

    def _key(self, name: str) -> str:
        return self.keys.get(name, name)

    def open_for(self, name: str) -> float | None:
        return self.shared.open_for(self._key(name))

    def failures(self, name: str) -> int:
        return self.shared.failures(self._key(name))

    def record(self, name: str, error: Any) -> None:
        self.shared.record(self._key(name), error)


# --- clients, probes and plans per route ------------------------------------------


class RouteClients:
    """Transport clients, probes and fallback plans per route, built on first use;
    owns the local server if it starts one."""

    def __init__(self, routes: ModelRoutes) -> None:
        self.routes = routes
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}
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
            from runtime.local_server import local_server

            server = self._stack.enter_context(local_server())
            self._local_base_url = server.base_url
        return self._local_base_url

    def client_for(self, provider: str) -> Any:
        name, _ = self.routes.route_for(provider)
        with self._lock:
            return self._target_locked(name).client

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
        settings = self.routes.models.breaker
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
        from plugin_daemon_client import LLMClient

        api_key = os.environ.get(route.api_key_env) if route.api_key_env else None
        if route.kind == LOCAL:
            base_url = self._start_local_locked()
            client = LLMClient(kind="openai-compatible", base_url=base_url)
        else:
            assert route.base_url is not None  # the model validator requires it
            base_url = route.base_url
            client = LLMClient(
                kind=route.kind,
                base_url=base_url,
                api_key=api_key,
                tenant_id=route.tenant_id,
                plugin_id=route.plugin_id,
            )
        close = getattr(client, "close", None)
        if callable(close):
            self._stack.callback(close)
        self._clients[name] = client
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
        )

    def close(self) -> None:
        self._stack.close()
