"""Where each DSL `model.provider` is served: the models file and the clients it yields.

    providers:
      openai: {kind: openai-compatible, base_url: https://api.example/v1, api_key_env: OPENAI_API_KEY}
      langgenius/ollama/ollama: {kind: plugin-daemon, base_url: http://daemon:5002,
                                 api_key_env: DAEMON_KEY, tenant_id: t1, plugin_id: langgenius/ollama}
      local: {kind: local}
    default: local            # for providers not listed

Credentials come only from the environment variables named by `api_key_env`.
With no models file every provider is served by the embedded llama-server.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from nodes.config import DslModel, choice, dsl_error
from runtime.problems import DslError, Problem, problems_from_validation

LOCAL = "local"
KINDS = ("openai-compatible", "plugin-daemon", LOCAL)


class ProviderRoute(DslModel):
    kind: choice(*KINDS)  # type: ignore[valid-type]
    base_url: str | None = None
    api_key_env: str | None = None
    tenant_id: str | None = None
    plugin_id: str | None = None

    @model_validator(mode="after")
    def _needs_url(self) -> ProviderRoute:
        if self.kind != LOCAL and not self.base_url:
            raise dsl_error(
                "dsl.models.baseUrl", "base_url is required for kind {kind}", kind=self.kind
            )
        return self


class ModelsFile(DslModel):
    providers: dict[str, ProviderRoute] = Field(default_factory=dict)
    default: str | None = None

    @model_validator(mode="after")
    def _default_exists(self) -> ModelsFile:
        if self.default and self.default != LOCAL and self.default not in self.providers:
            raise dsl_error(
                "dsl.models.unknownDefault",
                "default names provider {name}, which is not listed under providers",
                name=self.default,
            )
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
        return name, self.models.providers.get(name, ProviderRoute(kind=LOCAL))

    def check(self, providers: Iterable[str]) -> None:
        """Fail before the run when a needed credential variable is unset."""
        for provider in sorted(set(providers)):
            name, route = self.route_for(provider)
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
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DslError([Problem("dsl.file.missing", {"path": str(file)})]) from None
    except yaml.YAMLError as exc:
        raise DslError(
            [Problem("dsl.file.yaml", {"path": str(file), "where": "?", "detail": str(exc)})]
        ) from None
    try:
        return ModelRoutes(ModelsFile.model_validate(raw or {}))
    except ValidationError as exc:
        raise DslError(problems_from_validation(exc, prefix=str(file))) from None


class RouteClients:
    """Transport clients per route, built on first use; owns the local server if it starts one."""

    def __init__(self, routes: ModelRoutes) -> None:
        self.routes = routes
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}
        self._stack = ExitStack()
        self._local_base_url: str | None = None

    def needs_local(self, providers: Iterable[str]) -> bool:
        return any(self.routes.route_for(p)[1].kind == LOCAL for p in providers)

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
        from plugin_daemon_client import LLMClient

        name, route = self.routes.route_for(provider)
        with self._lock:
            client = self._clients.get(name)
            if client is None:
                api_key = os.environ.get(route.api_key_env) if route.api_key_env else None
                if route.kind == LOCAL:
                    client = LLMClient(
                        kind="openai-compatible", base_url=self._start_local_locked()
                    )
                else:
                    client = LLMClient(
                        kind=route.kind,
                        base_url=route.base_url,
                        api_key=api_key,
                        tenant_id=route.tenant_id,
                        plugin_id=route.plugin_id,
                    )
                close = getattr(client, "close", None)
                if callable(close):
                    self._stack.callback(close)
                self._clients[name] = client
            return client

    def close(self) -> None:
        self._stack.close()
