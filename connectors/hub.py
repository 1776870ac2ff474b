"""The connectors one run (or one process) uses, built from the runtime settings."""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firstgate.connectors.api_tools import ApiAuth, ApiProvider
from firstgate.connectors.guarded_http import (
    DEFAULT_MAX_BINARY_BYTES,
    DEFAULT_MAX_REDIRECTS,
    DEFAULT_MAX_TEXT_BYTES,
    GuardedHttp,
    HttpLimits,
)
from firstgate.connectors.knowledge import KnowledgeBackend, KnowledgeError
from firstgate.connectors.mcp_client import McpServer
from firstgate.connectors.net_policy import NetworkPolicy
from firstgate.connectors.smtp_mail import MailError, MailServer
from firstgate.connectors.tool_messages import ToolError


@dataclass
class Connectors:
    """What nodes that reach the outside world get through their `NodeContext`.

    `settings` is the runtime settings file (any object with its `http_request`,
    `knowledge` and `tools` sections; absent sections mean the defaults).
    """

    settings: Any = None
    # Runs `workflow` tools: set by the runtime (it runs workflows; nothing
    # here can). `.run(provider_id, inputs, timeout_s=, cancel=) -> outputs`.
    workflow_tools: Any = None
    # Keeps the human-input forms a run opens: set by the runtime to its store
    # (`add_form(FormRecord)`); None when the run has no store.
    forms: Any = None
    _http: GuardedHttp | None = field(default=None, init=False, repr=False)
    _files_dir: Path | None = field(default=None, init=False, repr=False)
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def from_settings(cls, settings: Any) -> Connectors:
        return cls(settings)

    def section(self, name: str) -> Any:
        return getattr(self.settings, name, None)

    @property
    def http(self) -> GuardedHttp:
        with self._lock:
            if self._http is None:
                section = self.section("http_request")
                self._http = GuardedHttp(
                    NetworkPolicy(getattr(section, "allow", ())),
                    HttpLimits(
                        max_redirects=getattr(section, "max_redirects", DEFAULT_MAX_REDIRECTS),
                        max_text_bytes=getattr(section, "max_text_bytes", DEFAULT_MAX_TEXT_BYTES),
                        max_binary_bytes=getattr(
                            section, "max_binary_bytes", DEFAULT_MAX_BINARY_BYTES
                        ),
                    ),
                )
            return self._http

    def dataset(self, dataset_id: str) -> tuple[Any, KnowledgeBackend]:
        """The settings entry of a dataset and its backend (shared, built on first use)."""
        datasets = getattr(self.section("knowledge"), "datasets", {}) or {}
        spec = datasets.get(dataset_id)
        if spec is None:
            raise KnowledgeError("errors.knowledge.unknownDataset", dataset=dataset_id)
        return spec, self.cached(f"knowledge:{dataset_id}", lambda: _backend(spec))

    def files_dir(self) -> Path:
        """Where files that nodes produce go: `files.dir` from the settings, else a
        private temporary folder made once per process (kept: the files are outputs)."""
        with self._lock:
            if self._files_dir is None:
                configured = getattr(self.section("files"), "dir", None)
                self._files_dir = (
                    Path(configured).expanduser()
                    if configured
                    else Path(tempfile.mkdtemp(prefix="firstgate-files-"))
                )
            return self._files_dir

    def mcp_server(self, server_id: str) -> McpServer:
        """The MCP server an `mcp` tool node names (its `provider_id`)."""
        tools = self.section("tools")
        spec = (getattr(tools, "mcp_servers", None) or {}).get(server_id)
        if spec is None:
            raise ToolError("errors.tool.unknownMcpServer", server=server_id)
        headers = {
            header: env_value(env, f"a header of MCP server {server_id}")
            for header, env in spec.headers_env.items()
        }
        return self.cached(
            f"mcp:{server_id}",
            lambda: McpServer(
                server_id,
                spec.url,
                headers,
                timeout_s=spec.timeout_s,
                max_file_bytes=getattr(tools, "max_file_bytes", 10 * 1024 * 1024),
            ),
        )

    def mail_server(self) -> MailServer:
        """The SMTP server of the settings' `email` section (the loader refuses a
        node that mails when it names none); its password from the environment."""
        section = self.section("email")
        host = getattr(section, "smtp_host", None)
        if section is None or not host:
            raise MailError("errors.email.noServer")
        password = None
        if section.password_env:
            password = os.environ.get(section.password_env)
            if not password:
                raise MailError("errors.email.missingPassword", env=section.password_env)
        return MailServer(
            host=host,
            port=section.smtp_port,
            security=section.security,
            sender=section.sender,
            timeout_s=float(section.timeout_s),
            username=section.username,
            password=password,
        )

    def api_provider(self, provider_id: str) -> ApiProvider:
        """The `api` tool provider the settings define (`tools.api_providers`)."""
        spec = (getattr(self.section("tools"), "api_providers", None) or {}).get(provider_id)
        if spec is None:
            raise ToolError("errors.tool.unknownApiProvider", provider=provider_id)
        auth = spec.auth
        key = env_value(auth.key_env, f"the key of API tool {provider_id}") if auth.key_env else ""
        limits = self.http.limits  # not inside `cached`: it holds the lock `http` takes
        return self.cached(
            f"api:{provider_id}",
            lambda: ApiProvider.from_document(
                provider_id,
                spec.document,
                ApiAuth(auth.type, auth.name, auth.prefix, key),
                limits,
            ),
        )

    def cached(self, key: str, build: Any) -> Any:
        """One shared instance per key (clients, indexes), built on first use."""
        with self._lock:
            if key not in self._cache:
                self._cache[key] = build()
            return self._cache[key]

    def close(self) -> None:
        with self._lock:
            if self._http is not None:
                self._http.close()
                self._http = None
            for item in self._cache.values():
                close = getattr(item, "close", None)
                if callable(close):
                    close()
            self._cache.clear()


def env_value(name: str, what: str) -> str:
    """A credential from the environment (`what` says whose), or a ToolError naming it."""
    value = os.environ.get(name)
    if not value:
        raise ToolError("errors.tool.missingEnv", env=name, what=what)
    return value


def _backend(spec: Any) -> KnowledgeBackend:
    if spec.kind == "local":
        from firstgate.connectors.local_index import LocalIndex

        return LocalIndex(spec.index)
    from firstgate.connectors.external_knowledge import ExternalKnowledge

    api_key = None
    if spec.api_key_env:
        api_key = os.environ.get(spec.api_key_env)
        if not api_key:
            raise KnowledgeError("errors.knowledge.missingKey", env=spec.api_key_env)
    return ExternalKnowledge(spec.endpoint, spec.knowledge_id, api_key, timeout_s=spec.timeout_s)
