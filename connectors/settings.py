"""The runtime settings sections of the connectors: `http_request`, `knowledge`, `tools`.

    http_request:
      allow: ["127.0.0.1:8080", "10.0.0.0/8", "intranet.example"]
      max_redirects: 20
      max_text_bytes: 1048576       # Dify's default, 1 MiB
      max_binary_bytes: 10485760    # Dify's default, 10 MiB
    knowledge:
      datasets:
        6f1c...: {kind: external, endpoint: https://kb.example/api, api_key_env: KB_KEY,
                  knowledge_id: support-articles, name: Support}
        a2b3...: {kind: local, index: ./kb/handbook.sqlite, name: Handbook}
    tools:
      timeout_s: 60
      plugin_daemon: {base_url: http://127.0.0.1:5002, api_key_env: PLUGIN_DAEMON_KEY,
                      tenant_id: my-tenant}
      providers:
        langgenius/tavily/tavily: {credentials_env: {tavily_api_key: TAVILY_KEY}}
      mcp_servers:
        my-server-id: {url: http://127.0.0.1:8000/mcp, headers_env: {Authorization: MCP_AUTH}}

Endpoints named here (knowledge APIs, the plugin daemon, MCP servers) are the
operator's trusted settings: the `http_request.allow` policy is for URLs that
come from a workflow. Credentials come only from environment variables.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from connectors.guarded_http import (
    DEFAULT_MAX_BINARY_BYTES,
    DEFAULT_MAX_REDIRECTS,
    DEFAULT_MAX_TEXT_BYTES,
)
from connectors.net_policy import AllowEntryError, parse_allow


class _Section(BaseModel):
    # A typo in a settings file is reported, not silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)


def _allow_entry(value: Any) -> str:
    if not isinstance(value, str):
        raise PydanticCustomError(
            "dsl.settings.allowEntry",
            "must be a host, host:port, address or CIDR block, got {got}",
            {"got": repr(value)[:80]},
        )
    try:
        parse_allow(value)
    except AllowEntryError as exc:
        raise PydanticCustomError(
            "dsl.settings.allowEntry",
            "must be a host, host:port, address or CIDR block, got {got}",
            {"got": str(exc)[:120]},
        ) from None
    return value


def _http_url(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise PydanticCustomError(
            "dsl.models.baseUrlScheme",
            "base_url must start with http:// or https://, got {value}",
            {"value": repr(value)[:80]},
        )
    return value.rstrip("/")


HttpUrl = Annotated[str, BeforeValidator(_http_url)]
AllowEntry = Annotated[str, BeforeValidator(_allow_entry)]


class HttpRequestSettings(_Section):
    allow: list[AllowEntry] = Field(default_factory=list)
    max_redirects: int = Field(default=DEFAULT_MAX_REDIRECTS, ge=0, le=100)
    max_text_bytes: int = Field(default=DEFAULT_MAX_TEXT_BYTES, ge=1)
    max_binary_bytes: int = Field(default=DEFAULT_MAX_BINARY_BYTES, ge=1)


class ExternalDataset(_Section):
    kind: Literal["external"]
    endpoint: HttpUrl
    knowledge_id: str = Field(min_length=1)
    api_key_env: str | None = None
    name: str | None = None
    description: str = ""
    # Single retrieval mode uses the dataset's own settings (Dify: the dataset's retrieval model).
    top_k: int = Field(default=4, ge=1, le=100)
    score_threshold: float | None = Field(default=None, ge=0, le=1)
    timeout_s: float = Field(default=30.0, gt=0, le=600)


class LocalDataset(_Section):
    kind: Literal["local"]
    index: str = Field(min_length=1)
    name: str | None = None
    description: str = ""
    top_k: int = Field(default=4, ge=1, le=100)
    score_threshold: float | None = Field(default=None, ge=0, le=1)


Dataset = Annotated[ExternalDataset | LocalDataset, Field(discriminator="kind")]


class KnowledgeSettings(_Section):
    datasets: dict[str, Dataset] = Field(default_factory=dict)


class PluginDaemonSettings(_Section):
    base_url: HttpUrl
    tenant_id: str = Field(min_length=1)
    api_key_env: str | None = None
    user_id: str = "firstgate"


class ToolProviderSettings(_Section):
    # Credential name -> environment variable holding it.
    credentials_env: dict[str, str] = Field(default_factory=dict)


class McpServerSettings(_Section):
    url: HttpUrl
    # Header name -> environment variable holding its value (e.g. Authorization).
    headers_env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)


class ToolsSettings(_Section):
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    plugin_daemon: PluginDaemonSettings | None = None
    providers: dict[str, ToolProviderSettings] = Field(default_factory=dict)
    mcp_servers: dict[str, McpServerSettings] = Field(default_factory=dict)


class ConnectorSettings(_Section):
    """The three sections together, as the runtime settings file carries them."""

    http_request: HttpRequestSettings = Field(default_factory=HttpRequestSettings)
    knowledge: KnowledgeSettings = Field(default_factory=KnowledgeSettings)
    tools: ToolsSettings = Field(default_factory=ToolsSettings)
