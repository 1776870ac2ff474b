"""The connectors one run (or one process) uses, built from the runtime settings."""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firstgate.common.sections import Sections
from firstgate.connectors.api_tools import ApiAuth, ApiProvider
from firstgate.connectors.guarded_http import GuardedHttp
from firstgate.connectors.knowledge import KnowledgeBackend, KnowledgeError
from firstgate.connectors.mcp_client import McpServer
from firstgate.connectors.net_policy import NetworkPolicy
from firstgate.connectors.settings import (
    Dataset,
    FilesSettings,
    HttpRequestSettings,
    KnowledgeSettings,
    LocalDataset,
    ToolsSettings,
)
from firstgate.connectors.smtp_mail import EmailSettings, MailError, MailServer
from firstgate.connectors.tool_messages import ToolError
from pydantic import BaseModel


@dataclass
class Connectors:
    """What nodes that reach the outside world get through their `NodeContext`.

    `sections` are the runtime settings file's (`common.sections`): each reader
    takes its own, typed (`connectors.sections.get(ToolsSettings)`).
    """

    sections: Sections = field(default_factory=Sections)
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
    def from_settings(cls, settings: BaseModel | None) -> Connectors:
        """The connectors of a settings file (None: every default)."""
        return cls(Sections(settings))

    @property
    def tools(self) -> ToolsSettings:
        return self.sections.get(ToolsSettings)

    @property
    def http(self) -> GuardedHttp:
        with self._lock:
            if self._http is None:
                section = self.sections.get(HttpRequestSettings)
                self._http = GuardedHttp(NetworkPolicy(section.allow), section.limits())
            return self._http

    def dataset(self, dataset_id: str) -> tuple[Dataset, KnowledgeBackend]:
        """The settings entry of a dataset and its backend (shared, built on first use)."""
        spec = self.sections.get(KnowledgeSettings).datasets.get(dataset_id)
        if spec is None:
            raise KnowledgeError("errors.knowledge.unknownDataset", dataset=dataset_id)
        return spec, self.cached(f"knowledge:{dataset_id}", lambda: _backend(spec))

    def files_dir(self) -> Path:
        """Where files that nodes produce go: `files.dir` from the settings, else a
        private temporary folder made once per process (kept: the files are outputs)."""
        with self._lock:
            if self._files_dir is None:
                configured = self.sections.get(FilesSettings).dir
                self._files_dir = (
                    Path(configured).expanduser()
                    if configured
                    else Path(tempfile.mkdtemp(prefix="firstgate-files-"))
                )
            return self._files_dir

    def mcp_server(self, server_id: str) -> McpServer:
        """The MCP server an `mcp` tool node names (its `provider_id`)."""
        tools = self.tools
        spec = tools.mcp_servers.get(server_id)
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
                max_file_bytes=tools.max_file_bytes,
            ),
        )

    def mail_server(self) -> MailServer:
        """The SMTP server of the settings' `email` section (the loader refuses a
        node that mails when it names none); its password from the environment."""
        section = self.sections.get(EmailSettings)
        if not section.smtp_host:
            raise MailError("errors.email.noServer")
        password = None
        if section.password_env:
            password = os.environ.get(section.password_env)
            if not password:
                raise MailError("errors.email.missingPassword", env=section.password_env)
        return MailServer(
            host=section.smtp_host,
            port=section.smtp_port,
            security=section.security,
            sender=section.sender,
            timeout_s=float(section.timeout_s),
            username=section.username,
            password=password,
        )

    def api_provider(self, provider_id: str) -> ApiProvider:
        """The `api` tool provider the settings define (`tools.api_providers`)."""
        spec = self.tools.api_providers.get(provider_id)
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


def _backend(spec: Dataset) -> KnowledgeBackend:
    if isinstance(spec, LocalDataset):
        from firstgate.connectors.local_index import LocalIndex

        return LocalIndex(spec.index)
    from firstgate.connectors.external_knowledge import ExternalKnowledge

    api_key = None
    if spec.api_key_env:
        api_key = os.environ.get(spec.api_key_env)
        if not api_key:
            raise KnowledgeError("errors.knowledge.missingKey", env=spec.api_key_env)
    return ExternalKnowledge(spec.endpoint, spec.knowledge_id, api_key, timeout_s=spec.timeout_s)
