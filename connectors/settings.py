"""The settings sections the connectors read: `http_request`, `knowledge`,
`files` and `tools`. `runtime.settings` assembles them into the settings
file; each reader gets its own section, typed, from `common.sections`.

    http_request:
      allow: ["127.0.0.1:8080", "10.0.0.0/8", "intranet.example"]
      max_redirects: 20
      max_text_bytes: 1048576       # Dify's default, 1 MiB
      max_binary_bytes: 10485760    # Dify's default, 10 MiB

Only URLs that come from a workflow file or its inputs are under this policy;
endpoints the operator configures (model routes, plugin daemon, knowledge
APIs, MCP servers) are trusted settings.

    knowledge:
      datasets:
        6f1c...: {kind: external, endpoint: https://kb.example/api, api_key_env: KB_KEY,
                  knowledge_id: support-articles, name: Support}
        a2b3...: {kind: local, index: ./kb/handbook.sqlite, name: Handbook}

`external` is Dify's External Knowledge API (`POST <endpoint>/retrieval`, a
bearer key from `api_key_env`); `local` is an SQLite FTS5 index built with
`firstgate index DIR --dataset ID --index PATH`. `top_k` and
`score_threshold` are the dataset's own retrieval settings, used by single
retrieval mode (multiple mode takes the node's).

    files:
      dir: ./run-files     # default: a private temporary folder per process

A tool's blob or image and a binary HTTP response become Dify file objects
(`tool_file`) whose bytes live here; the files outlive the run (their paths
are in the run's outputs), so the folder is the operator's to clean.

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

from firstgate.common.dsl import SettingsModel, dsl_error, shown
from firstgate.common.problems import DslError
from firstgate.common.yaml_reader import read_yaml
from firstgate.connectors import external_knowledge, mcp_client
from firstgate.connectors.api_tools import ApiSchemaError, parse_openapi
from firstgate.connectors.guarded_http import HttpLimits
from firstgate.connectors.net_policy import AllowEntryError, parse_allow
from pydantic import BeforeValidator, Field, model_validator

_HTTP = HttpLimits()

# --- http_request --------------------------------------------------------------


def _allow_entry(value: Any) -> str:
    try:
        if not isinstance(value, str):
            raise AllowEntryError(shown(value))
        parse_allow(value)
    except AllowEntryError as exc:
        raise dsl_error(
            "dsl.settings.allowEntry",
            "must be a host, host:port, address or CIDR block, got {got}",
            got=str(exc)[:120],
        ) from None
    return value


class HttpRequestSettings(SettingsModel):
    allow: list[Annotated[str, BeforeValidator(_allow_entry)]] = Field(default_factory=list)
    max_redirects: int = Field(default=_HTTP.max_redirects, ge=0, le=100)
    max_text_bytes: int = Field(default=_HTTP.max_text_bytes, ge=1)
    max_binary_bytes: int = Field(default=_HTTP.max_binary_bytes, ge=1)

    def limits(self) -> HttpLimits:
        return HttpLimits(self.max_redirects, self.max_text_bytes, self.max_binary_bytes)


# --- knowledge -----------------------------------------------------------------


def http_url(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise dsl_error(
            "dsl.models.baseUrlScheme",
            "base_url must start with http:// or https://, got {value}",
            value=shown(value)[:80],
        )
    return value.rstrip("/")


HttpUrl = Annotated[str, BeforeValidator(http_url)]


class _Dataset(SettingsModel):
    name: str | None = None
    description: str = ""
    top_k: int = Field(default=4, ge=1, le=100)
    score_threshold: float | None = Field(default=None, ge=0, le=1)


class ExternalDataset(_Dataset):
    kind: Literal["external"]
    endpoint: HttpUrl
    knowledge_id: str = Field(min_length=1)
    api_key_env: str | None = None
    timeout_s: float = Field(default=external_knowledge.DEFAULT_TIMEOUT_S, gt=0, le=600)


class LocalDataset(_Dataset):
    kind: Literal["local"]
    index: str = Field(min_length=1)


Dataset = Annotated[ExternalDataset | LocalDataset, Field(discriminator="kind")]


class KnowledgeSettings(SettingsModel):
    datasets: dict[str, Dataset] = Field(default_factory=dict)


# --- files ---------------------------------------------------------------------


class FilesSettings(SettingsModel):
    dir: str | None = None


# --- tools ---------------------------------------------------------------------


class PluginDaemonSettings(SettingsModel):
    base_url: HttpUrl
    tenant_id: str = Field(min_length=1)
    api_key_env: str | None = None
    user_id: str | None = None  # None: the client's default


class ToolProviderSettings(SettingsModel):
    credentials_env: dict[str, str] = Field(default_factory=dict)


class McpServerSettings(SettingsModel):
    url: HttpUrl
    headers_env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=mcp_client.DEFAULT_TIMEOUT_S, gt=0, le=3600)


class ApiAuthSettings(SettingsModel):
    type: Literal["none", "header", "query"] = "none"
    name: str = ""  # the header (default Authorization) or query parameter
    prefix: Literal["bearer", "basic", "custom"] = "custom"
    key_env: str | None = None


class ApiProviderSettings(SettingsModel):
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


class WorkflowProviderSettings(SettingsModel):
    """A `workflow` tool provider: a DSL file run as the tool."""

    file: Annotated[str, BeforeValidator(_existing_file)]


class ToolsSettings(SettingsModel):
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
