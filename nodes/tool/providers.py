"""Where a tool node's call goes, behind one interface: a built-in tool run in
this process, a tool of an MCP server, or a plugin's tool through the Dify
plugin daemon.

`ToolProvider.invoke(ToolCall(tool, arguments, timeout_s, cancel))` yields Dify's
tool messages (`connectors.tool_messages`) or raises a `ToolError`; the node
turns the messages into its outputs. Which provider serves a node is decided
from its `provider_type` and `provider_id` by `provider_for`.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from firstgate.common.cancel import Cancellable
from firstgate.common.files import File
from firstgate.connectors.api_tools import ApiProvider
from firstgate.connectors.builtin_tools import BuiltinTool
from firstgate.connectors.hub import Connectors, env_value
from firstgate.connectors.mcp_client import McpServer
from firstgate.connectors.tool_messages import (
    MessageType,
    ToolCancelledError,
    ToolError,
    ToolMessage,
    ToolTimeoutError,
    json_message,
    merge_blob_chunks,
    parse_wire_message,
    text,
)
from firstgate.connectors.tool_parameters import prepare
from firstgate.nodes.values import jsonable
from firstgate.plugin_daemon_client.client import DEFAULT_MAX_REPLY_BYTES
from firstgate.plugin_daemon_client.errors import (
    ConnectError,
    FirstGateError,
    StreamCancelledError,
    StreamTotalTimeoutError,
)
from firstgate.plugin_daemon_client.protocols.base import DEFAULT_USER_ID
from firstgate.plugin_daemon_client.tool_dispatch import PluginToolClient

# Dify's provider-id rule (`GenericProviderID`): a bare provider name, as
# exports made before Dify 1.0 give it, is the plugin `langgenius/<name>/<name>`;
# `ToolProviderID` names these few plugins `<name>_tool`.
_BARE_PROVIDER = re.compile(r"[a-z0-9_-]+")
_TOOL_SUFFIXED = frozenset({"jina", "siliconflow", "stepfun", "gitee_ai"})


def plugin_id(provider_id: str) -> str | None:
    """The plugin Dify 1.x runs a bare built-in provider name as, or None when
    the name is not one (Dify refuses it as an invalid plugin id)."""
    if "/" in provider_id or not _BARE_PROVIDER.fullmatch(provider_id):
        return None
    plugin = f"{provider_id}_tool" if provider_id in _TOOL_SUFFIXED else provider_id
    return f"langgenius/{plugin}/{provider_id}"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of one tool: its arguments, its time bound, the run's cancel token."""

    tool: str
    arguments: Mapping[str, Any]
    timeout_s: float
    cancel: Cancellable | None = None


class ToolProvider(Protocol):
    def invoke(self, call: ToolCall) -> Iterable[ToolMessage]: ...


class BuiltinProvider:
    """A provider of `connectors.builtin_tools`: parameters are cast and
    defaulted by the tool's declarations, then the tool runs here."""

    def __init__(self, provider_id: str, tools: Mapping[str, BuiltinTool]) -> None:
        self.provider_id = provider_id
        self.tools = tools

    def invoke(self, call: ToolCall) -> Iterator[ToolMessage]:
        found = self.tools.get(call.tool)
        if found is None:
            raise ToolError("errors.tool.unknownTool", tool=call.tool, provider=self.provider_id)
        yield from found.run(prepare(found.parameters, call.arguments))


class McpProvider:
    def __init__(self, server: McpServer) -> None:
        self.server = server

    def invoke(self, call: ToolCall) -> list[ToolMessage]:
        return self.server.call(
            call.tool, call.arguments, timeout_s=call.timeout_s, cancel=call.cancel
        )


class PluginProvider:
    """A plugin's tool, dispatched to the Dify plugin daemon of the settings
    (`tools.plugin_daemon`), with the provider's credentials from the
    environment (`tools.providers.<id>.credentials_env`)."""

    def __init__(
        self, provider_id: str, client: PluginToolClient, credentials: Mapping[str, str]
    ) -> None:
        self.provider_id = provider_id
        self.client = client
        self.credentials = dict(credentials)

    @classmethod
    def from_settings(
        cls, provider_id: str, connectors: Connectors, alias: str = ""
    ) -> PluginProvider:
        """`alias`: the bare name an older export gives (its credentials may be
        under either name)."""
        tools = connectors.tools
        daemon = tools.plugin_daemon
        if daemon is None:
            raise ToolError("errors.tool.noDaemon", provider=provider_id)
        api_key = None
        if daemon.api_key_env:
            api_key = env_value(daemon.api_key_env, "the plugin daemon key")
        # A whole blob travels on one line, base64-encoded.
        max_file = tools.max_file_bytes
        max_line = max_file * 4 // 3 + 64 * 1024
        client = connectors.cached(
            "plugin-daemon-tools",
            lambda: PluginToolClient(
                daemon.base_url,
                daemon.tenant_id,
                api_key,
                user_id=daemon.user_id or DEFAULT_USER_ID,
                max_line_bytes=max_line,
                max_reply_bytes=max(DEFAULT_MAX_REPLY_BYTES, 4 * max_line),
            ),
        )
        providers = tools.providers
        spec = providers.get(provider_id) or (providers.get(alias) if alias else None)
        credentials = {
            name: env_value(env, f"a credential of {provider_id}")
            for name, env in (spec.credentials_env.items() if spec is not None else ())
        }
        return cls(provider_id, client, credentials)

    def invoke(self, call: ToolCall) -> Iterator[ToolMessage]:
        stream = self.client.invoke(
            self.provider_id,
            call.tool,
            call.arguments,
            credentials=self.credentials,
            timeout_s=call.timeout_s,
            cancel=call.cancel,
            secrets=tuple(self.credentials.values()),
        )
        return daemon_messages(stream, self.client, call.tool, self.provider_id, call.timeout_s)


def daemon_messages(
    stream: Iterator[dict[str, Any]],
    client: PluginToolClient,
    name: str,
    provider_id: str,
    timeout_s: float,
    failed_key: str = "errors.tool.pluginFailed",
) -> Iterator[ToolMessage]:
    """A daemon dispatch's wire messages as tool messages; its failures as the
    tool errors a node reports (`name`: the tool or strategy that was called;
    `failed_key`: the message of a failure the plugin reports)."""
    try:
        with contextlib.closing(stream):
            for raw in stream:
                yield parse_wire_message(raw)
    except StreamTotalTimeoutError:
        raise ToolTimeoutError(seconds=f"{timeout_s:g}") from None
    except StreamCancelledError:
        raise ToolCancelledError() from None
    except ConnectError as exc:
        raise ToolError(
            "errors.tool.daemonUnreachable",
            url=client.base_url,
            detail=exc.params.get("detail", ""),
        ) from None
    except FirstGateError as exc:
        # The transport's own messages speak of model servers; a tool's do not.
        detail = exc.params.get("detail") or exc.params.get("excerpt") or str(exc)
        raise ToolError(failed_key, tool=name, provider=provider_id, detail=detail) from None


class ApiToolProvider:
    """An operation of an OpenAPI document the settings name (`tools.api_providers`)."""

    def __init__(self, provider: ApiProvider) -> None:
        self.provider = provider

    def invoke(self, call: ToolCall) -> list[ToolMessage]:
        return self.provider.call(
            call.tool, call.arguments, timeout_s=call.timeout_s, cancel=call.cancel
        )


class WorkflowToolProvider:
    """Another workflow run as the tool (`tools.workflow_providers`), by the runtime."""

    def __init__(self, provider_id: str, runner: Any) -> None:
        self.provider_id = provider_id
        self.runner = runner

    def invoke(self, call: ToolCall) -> list[ToolMessage]:
        outputs = self.runner.run(
            self.provider_id, call.arguments, timeout_s=call.timeout_s, cancel=call.cancel
        )
        # Dify's workflow tool: its file outputs as files, the rest as JSON and text.
        files = {k: v for k, v in outputs.items() if _is_files(v)}
        rest = {k: v for k, v in outputs.items() if k not in files}
        messages = [
            ToolMessage(MessageType.FILE, meta={"file": file})
            for value in files.values()
            for file in (value if isinstance(value, list) else [value])
        ]
        messages.append(text(json.dumps(jsonable(rest), ensure_ascii=False)))
        messages.append(json_message(jsonable(rest), suppress_output=True))
        return messages


def _is_files(value: Any) -> bool:
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(isinstance(item, File) for item in items)


def provider_for(provider_type: str, provider_id: str, connectors: Connectors) -> ToolProvider:
    """The provider serving a tool node (the node's data was checked at load time)."""
    from firstgate.connectors import builtin_tools

    if provider_type == "mcp":
        return McpProvider(connectors.mcp_server(provider_id))
    if provider_type == "api":
        return ApiToolProvider(connectors.api_provider(provider_id))
    if provider_type == "workflow":
        if connectors.workflow_tools is None:
            raise ToolError("errors.tool.unknownWorkflowProvider", provider=provider_id)
        return WorkflowToolProvider(provider_id, connectors.workflow_tools)
    local = builtin_tools.provider(provider_id)
    if provider_type == "builtin" and local is not None:
        return BuiltinProvider(provider_id, local)
    plugin = plugin_id(provider_id) if provider_type == "builtin" else None
    if plugin is not None:  # an older export's built-in: Dify 1.x runs it as this plugin
        return PluginProvider.from_settings(plugin, connectors, alias=provider_id)
    return PluginProvider.from_settings(provider_id, connectors)


def capped(messages: Iterable[ToolMessage], max_bytes: int) -> Iterator[ToolMessage]:
    """Blob chunks reassembled, every file under the cap; the source is closed
    when this is (a provider's stream holds a socket and its deadline)."""
    source = iter(messages)
    try:
        yield from merge_blob_chunks(source, max_bytes)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
