"""The `tools` section: where tool nodes' providers run.

tools:
  timeout_s: 60                 # per tool call
  max_file_bytes: 10485760      # a file a tool returns (blob, image), at most
  plugin_daemon: {base_url: http://127.0.0.1:5002, api_key_env: PLUGIN_DAEMON_KEY,
                  tenant_id: my-tenant}
  providers:                    # credentials per provider id, from the environment
    langgenius/tavily/tavily: {credentials_env: {tavily_api_key: TAVILY_KEY}}
  mcp_servers:                  # provider_id of an `mcp` tool node -> server
    my-server-id: {url: http://127.0.0.1:8000/mcp, headers_env: {Authorization: MCP_AUTH}}
"""

from __future__ import annotations

from pydantic import Field

from nodes.config import DslModel
from runtime.settings.knowledge import HttpUrl


class PluginDaemonSettings(DslModel):
    base_url: HttpUrl
    tenant_id: str = Field(min_length=1)
    api_key_env: str | None = None
    user_id: str = "firstgate"


class ToolProviderSettings(DslModel):
    credentials_env: dict[str, str] = Field(default_factory=dict)


class McpServerSettings(DslModel):
    url: HttpUrl
    headers_env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)


class ToolsSettings(DslModel):
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    # A file a tool returns (a blob, an image) may not be bigger than this.
    max_file_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    plugin_daemon: PluginDaemonSettings | None = None
    providers: dict[str, ToolProviderSettings] = Field(default_factory=dict)
    mcp_servers: dict[str, McpServerSettings] = Field(default_factory=dict)
