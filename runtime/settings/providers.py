"""The `providers`, `default` and `breaker` keys of the settings file: where each
DSL `model.provider` is served.

    providers:
      openai: {kind: openai-compatible, base_url: https://api.example/v1, api_key_env: OPENAI_API_KEY}
      langgenius/ollama/ollama: {kind: plugin-daemon, base_url: http://daemon:5002,
                                 api_key_env: DAEMON_KEY, tenant_id: t1, plugin_id: langgenius/ollama}
      local: {kind: local}
    default: local            # for providers not listed

A route named after a Dify provider may leave out `kind` and `base_url` where
the provider implies them (`runtime.settings.provider_defaults`):
`langgenius/anthropic/anthropic: {api_key_env: ANTHROPIC_API_KEY}` is a whole
route.

Credentials come only from the environment variables named by `api_key_env`.
With no settings file every provider is served by the embedded llama-server.

Per route, optionally:

- `max_prompt_bytes`: the largest LLM prompt a node builds for it (UTF-8
  bytes, default 32 MiB), checked while the prompt is built;
- first-token budget: `first_token_timeout_s` (a number pins it, 0 disables,
  "auto"/empty: the formula), `first_token_ceiling_s`, and the formula's
  constants `first_token_cold_start_s`, `first_token_base_s`,
  `first_token_per_1k_s` (see `plugin_daemon_client.first_token_budget`);
- liveness probe: `probe: auto | llama.cpp-slots | llama.cpp-metrics | vllm |
  sglang | tgi | gate | llama-swap | ollama | off` (default `auto` for local and openai-compatible routes, `off`
  for plugin-daemon ones) and `probe_timeout_s` (4). A probe asks only the
  route's own origin and sends the route's key only there;
- fallback chain: `fallbacks: [route, ...]` (`fallback` is accepted too),
  tried in order when this route fails with a transient error; the
  fallback routes' own `fallbacks` are not followed (no nesting). Caps:
  `swap_attempt_timeout_ms`, `swap_attempt_timeout_ms_by_target: {route: ms}`,
  the clamp `swap_attempt_timeout_ms_max`, the total `swap_total_budget_ms`;
  `allow_same_host_fallback: true` on a target lets it run on the same busy
  local host as a target that just failed.

Top level, optionally: `breaker: {threshold: 5, cooldown_s: 60}` (see
`runtime.breakers`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from firstgate.common.dsl import PositiveSeconds, SettingsModel, between, dsl_error, shown
from firstgate.common.durations import DurationError, parse_duration
from firstgate.common.redaction import has_credentials, redact_url
from firstgate.plugin_daemon_client.fallback import (
    DEFAULT_BREAKER_COOLDOWN_S,
    DEFAULT_BREAKER_THRESHOLD,
)
from firstgate.plugin_daemon_client.first_token_budget import ROUTE_KEYS
from firstgate.plugin_daemon_client.probes import ProbeKind
from firstgate.plugin_daemon_client.protocols import PROTOCOLS
from firstgate.runtime.settings.provider_defaults import MISSING_KIND_MARK, with_defaults
from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

# The embedded llama-server (an OpenAI-compatible route the runtime starts).
LOCAL = "local"
# A route's `kind`: a wire protocol of the client's registry, or `local`.
KINDS = (*PROTOCOLS, LOCAL)
Kind = Literal[KINDS]  # type: ignore[valid-type]


# --- setting validators: a wrong value is a located models-file problem -------


def _budget_seconds(value: Any) -> float | str | None:
    """A first-token setting: a number of seconds >= 0, "auto" or empty (kept as
    written: the budget resolver reads "not set here" from it)."""
    try:
        number = parse_duration(value)
    except DurationError:
        raise dsl_error(
            "dsl.models.seconds",
            'must be a number of seconds (0 or more), "auto" or empty, got {got}',
            got=shown(value),
        ) from None
    return value if number is None else number


def _milliseconds(value: Any) -> float | None:
    """A fallback setting in ms. Only that it is a number is checked here: values
    that are 0, negative or not finite follow the fallback policy's rules (warned,
    then the next level applies), so they are reported at run time with what was
    used instead."""
    try:
        parse_duration(value, strings=False)
    except DurationError as error:
        if error.reason == "not_a_number":
            raise dsl_error(
                "dsl.models.milliseconds",
                "must be a number of milliseconds, got {got}",
                got=shown(value),
            ) from None
    return None if value is None else float(value)


def _off_if_false(value: Any) -> Any:
    return "off" if value is False else value  # YAML `probe: off` unquoted is a boolean


BudgetSeconds = Annotated[float | str | None, BeforeValidator(_budget_seconds)]
MillisecondsSetting = Annotated[float | None, BeforeValidator(_milliseconds)]


class ProviderRoute(SettingsModel):
    kind: Kind
    base_url: str | None = None
    # The reply's size on the wire; None: the client's default (64 MiB).
    max_reply_bytes: Annotated[int, between(1024, 1 << 40)] | None = None
    # The largest LLM prompt built for this route (UTF-8 bytes); None: 32 MiB.
    max_prompt_bytes: Annotated[int, between(1024, 1 << 40)] | None = None
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
    probe: Annotated[ProbeKind | None, BeforeValidator(_off_if_false)] = None
    probe_timeout_s: PositiveSeconds = None
    # Fallback chain.
    fallbacks: list[str] = Field(default_factory=list)
    allow_same_host_fallback: bool = False
    swap_attempt_timeout_ms: MillisecondsSetting = None
    swap_attempt_timeout_ms_by_target: dict[str, MillisecondsSetting] = Field(default_factory=dict)
    swap_attempt_timeout_ms_max: MillisecondsSetting = None
    swap_total_budget_ms: MillisecondsSetting = None
    # The server takes a JSON schema as the response format (structured output,
    # classifier and extractor answers); None: the kind's default.
    json_schema: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _implied_kind_known(cls, raw: Any) -> Any:
        # The provider's name implied a kind this build does not register yet
        # (`runtime.settings.provider_defaults`).
        if isinstance(raw, dict) and MISSING_KIND_MARK in raw:
            raise dsl_error(
                "dsl.models.impliedKind",
                "provider {provider} implies kind {kind}, which this version does not have; "
                "set kind and base_url",
                **raw[MISSING_KIND_MARK],
            )
        return raw

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
        if self.base_url and has_credentials(self.base_url):
            # Refused, never stripped (the client refuses them too).
            raise dsl_error(
                "dsl.models.baseUrlCredentials",
                "base_url must not contain credentials (user:password@), got {value}; "
                "put the key in the variable named by api_key_env",
                value=repr(redact_url(self.base_url, user=False)[:80]),
            )
        return self

    @property
    def probe_kind(self) -> str:
        """`auto` where a probe can reach the model server itself; `off` for the
        plugin daemon, whose host is the daemon, not the server doing the work."""
        if self.probe is not None:
            return self.probe
        protocol = PROTOCOLS.get(self.kind)
        return protocol.default_probe if protocol is not None else "auto"

    @property
    def takes_json_schema(self) -> bool:
        if self.json_schema is not None:
            return self.json_schema
        protocol = PROTOCOLS.get(self.kind)
        return protocol.default_json_schema if protocol is not None else True

    def budget_settings(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in ROUTE_KEYS if getattr(self, key) is not None}


def _fallback_error(
    message_key: str, english: str, key: str, route: str, target: str
) -> PydanticCustomError:
    # Built directly: the message's placeholder is called `key` (the setting's
    # path), which `dsl_error`'s own first parameter would shadow.
    return PydanticCustomError(message_key, english, {"key": key, "route": route, "target": target})


class BreakerSettings(SettingsModel):
    threshold: Annotated[int, between(1, 1000)] = DEFAULT_BREAKER_THRESHOLD
    cooldown_s: PositiveSeconds = DEFAULT_BREAKER_COOLDOWN_S


class ProvidersSection(SettingsModel):
    """The model-routing keys; `RuntimeSettings` extends it with the other sections."""

    providers: dict[str, ProviderRoute] = Field(default_factory=dict)
    default: str | None = None
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)

    @field_validator("providers", mode="before")
    @classmethod
    def _provider_defaults(cls, raw: Any) -> Any:
        """Dify's provider names imply their kind and base_url where a route is silent."""
        if not isinstance(raw, dict):
            return raw
        return {name: with_defaults(str(name), route, KINDS) for name, route in raw.items()}

    @model_validator(mode="after")
    def _default_exists(self) -> ProvidersSection:
        if self.default and self.default != LOCAL and self.default not in self.providers:
            raise dsl_error(
                "dsl.models.unknownDefault",
                "default names provider {name}, which is not listed under providers",
                name=self.default,
            )
        return self

    @model_validator(mode="after")
    def _fallbacks_exist(self) -> ProvidersSection:
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
