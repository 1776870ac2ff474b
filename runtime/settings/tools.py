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
  api_providers:                # provider_id of an `api` tool node -> OpenAPI document
    7c2d...: {openapi: ./weather.yaml, auth: {type: header, name: X-Api-Key, key_env: WX_KEY}}
  workflow_providers:           # provider_id of a `workflow` tool node -> a DSL file
    1f9e...: {file: ./flows/summarize.yml}
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from firstgate.common.dsl import DslModel, dsl_error
from firstgate.connectors.api_tools import ApiSchemaError, parse_openapi
from firstgate.runtime.dsl.problems import DslError
from firstgate.runtime.dsl.yaml_reader import read_yaml
from firstgate.runtime.settings.knowledge import HttpUrl
from pydantic import BeforeValidator, Field, model_validator


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


class ApiAuthSettings(DslModel):
    type: Literal["none", "header", "query"] = "none"
    name: str = ""  # the header (default Authorization) or query parameter
    prefix: Literal["bearer", "basic", "custom"] = "custom"
    key_env: str | None = None


class ApiProviderSettings(DslModel):
    """An `api` tool provider: an OpenAPI 3 document (YAML or JSON), read and
    checked when the settings load."""

    openapi: str = Field(min_length=1)
    auth: ApiAuthSettings = Field(default_factory=ApiAuthSettings)
    document: dict[str, Any] = Field(default_factory=dict, exclude=True, repr=False)

    @model_validator(mode="before")
    @classmethod
    def _read_document(cls, value: Any) -> Any:
        if not isinstance(value, dict) or not isinstance(value.get("openapi"), str):
            return value
        path = value["openapi"]
        try:
            document = read_yaml(path)
            parse_openapi(document, path)
        except DslError as exc:
            detail = exc.problems[0].render() if exc.problems else str(exc)
        except ApiSchemaError as exc:
            detail = str(exc)
        else:
            return {**value, "document": document}
        raise dsl_error(
            "dsl.settings.openapi",
            "cannot use the OpenAPI document {path}: {detail}",
            path=path,
            detail=detail,
        )


def _existing_file(value: Any) -> str:
    if not isinstance(value, str) or not Path(value).expanduser().is_file():
        raise dsl_error("dsl.settings.noSuchFile", "no such file: {path}", path=str(value)[:200])
    return value


class WorkflowProviderSettings(DslModel):
    """A `workflow` tool provider: a DSL file run as the tool."""

    file: Annotated[str, BeforeValidator(_existing_file)]


class ToolsSettings(DslModel):
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    # A file a tool returns (a blob, an image) may not be bigger than this.
    max_file_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    plugin_daemon: PluginDaemonSettings | None = None
    providers: dict[str, ToolProviderSettings] = Field(default_factory=dict)
    mcp_servers: dict[str, McpServerSettings] = Field(default_factory=dict)
    # An `api` tool node's provider_id -> its OpenAPI document and key.
    api_providers: dict[str, ApiProviderSettings] = Field(default_factory=dict)
    # A `workflow` tool node's provider_id -> the workflow (a DSL file) it runs.
    workflow_providers: dict[str, WorkflowProviderSettings] = Field(default_factory=dict)
