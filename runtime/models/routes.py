"""Which route serves a DSL `model.provider`: lookup, fallback chains and the
credential check made before a run starts."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from firstgate.common.redaction import MIN_SECRET_CHARS
from firstgate.locales.localized_error import LocalizedError
from firstgate.plugin_daemon_client.protocols import PROTOCOLS
from firstgate.runtime.settings.providers import LOCAL, ProviderRoute, ProvidersSection


class RouteError(LocalizedError):
    """A route cannot be used (missing credentials, no route): invalid input, not a run failure."""


def _plugin_id(name: str) -> bool:
    """`org/plugin/provider`, the marketplace's full provider id."""
    return name.count("/") == 2 and all(name.split("/"))


def _same_provider(dsl_name: str, route_name: str) -> bool:
    """A full plugin id and a short name match when the short name is the id's
    provider part; two different full ids never match."""
    if _plugin_id(dsl_name) == _plugin_id(route_name):
        return False
    full, short = (dsl_name, route_name) if _plugin_id(dsl_name) else (route_name, dsl_name)
    return full.rsplit("/", 1)[1] == short


class ModelRoutes:
    """Maps provider names to routes; unknown providers take the default (or `local`)."""

    def __init__(self, settings: ProvidersSection | None = None) -> None:
        self.settings = settings or ProvidersSection()

    def route_for(self, provider: str) -> tuple[str, ProviderRoute]:
        """Exact name first; else a plugin id (`langgenius/openai/openai`) and its
        provider's short name (`openai`) match each other; else the default."""
        providers = self.settings.providers
        if provider in providers:
            return provider, providers[provider]
        for name in sorted(providers):
            if _same_provider(provider, name):
                return name, providers[name]
        name = self.settings.default or LOCAL
        return name, self.named(name)

    def named(self, name: str) -> ProviderRoute:
        """The route called `name` (`local` need not be listed)."""
        return self.settings.providers.get(name, ProviderRoute(kind=LOCAL))

    def chain_for(self, provider: str) -> list[tuple[str, ProviderRoute]]:
        """The provider's route, then its fallback routes, in order."""
        name, route = self.route_for(provider)
        return [(name, route), *((f, self.named(f)) for f in route.fallbacks)]

    def schema_problems(
        self, provider: str, schema: dict[str, Any]
    ) -> Iterator[tuple[str, str, str]]:
        """(route, kind, why) for each route of the provider's chain that takes a
        JSON schema as the response format and whose protocol cannot express it."""
        for name, route in self.chain_for(provider):
            protocol = PROTOCOLS.get(route.kind)
            if protocol is None or not route.takes_json_schema:
                continue
            problem = protocol.schema_problem(schema)
            if problem is not None:
                yield name, route.kind, problem

    def check(self, providers: Iterable[str]) -> None:
        """Fail before the run when a needed credential variable is unset
        (fallback routes included: a chain must not break on its second link)."""
        for provider in sorted(set(providers)):
            for name, route in self.chain_for(provider):
                self._check_key(provider, name, route)

    @staticmethod
    def _check_key(provider: str, name: str, route: ProviderRoute) -> None:
        if not route.api_key_env:
            return
        key = os.environ.get(route.api_key_env)
        if not key:
            raise RouteError(
                "cli.models.missingKey", provider=provider, route=name, env=route.api_key_env
            )
        if len(key) < MIN_SECRET_CHARS:
            # Refused: a key this short cannot be redacted from what servers echo
            # without mangling ordinary words.
            raise RouteError(
                "cli.models.shortKey",
                provider=provider,
                route=name,
                env=route.api_key_env,
                min=MIN_SECRET_CHARS,
            )
