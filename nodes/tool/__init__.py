"""Tool node: Dify's fields and outputs; the call goes to a built-in tool, an
MCP server's tool, a plugin's tool through the plugin daemon, an OpenAPI
operation or another workflow (`nodes.tool_providers`).

Fields: `provider_id`, `provider_type`, `provider_name`, `tool_name`,
`tool_parameters` (per parameter `{type: mixed | variable | constant,
value}`: a template, a selector, or a fixed value) and
`tool_configurations` (the tool's settings: plain values in older exports,
the same `{type, value}` inputs when `tool_node_version` is set). Settings
and parameters are merged, parameters winning, as Dify merges them.

Outputs: `text` (text messages joined; a link adds `Link: <url>` on its own
line; streamed as it arrives), `files` (blobs written as files, images and
file links as remote files), `json` (every JSON message, or Dify's
`[{"data": []}]` when there was none), and one output per variable the tool
sets. What variables a plugin or MCP tool sets is not in the export (beyond
an `output_schema`), so selectors into such a node are not checked at load.

Providers: `builtin` with a provider built in here (`time`, also under its
plugin id `langgenius/time/time`) runs locally; any other `builtin` or
`plugin` provider (`org/plugin/provider`) goes to the plugin daemon of the
runtime settings; an older export's bare built-in name (`duckduckgo`) runs
as the plugin Dify 1.x makes of it (`langgenius/duckduckgo/duckduckgo`,
`tool_providers.plugin_id`), refused at load by that name when the settings
name no daemon; `mcp` names a server of `tools.mcp_servers` by its id.
`api` and `workflow` tools are defined in a Dify database, not in the
export: they run when the runtime settings define them (an OpenAPI document
in `tools.api_providers`, a workflow file in `tools.workflow_providers`),
else they are refused at load time by name, as `app` and
`dataset-retrieval` tools always are.
Every call is bounded by `tools.timeout_s`; a failure is a typed error the
node's retry and error strategy handle.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from firstgate.common.dsl import DslModel, dsl_error, note_warning, shown
from firstgate.common.files import File, from_bytes, from_remote_url
from firstgate.common.sections import Sections, context_sections
from firstgate.connectors import builtin_tools
from firstgate.connectors.api_tools import parse_openapi
from firstgate.connectors.settings import ToolsSettings
from firstgate.connectors.tool_messages import MessageType, ToolMessage
from firstgate.nodes.base import (
    ANY_OUTPUT,
    Needs,
    NodeContext,
    NodeResult,
    NodeRunError,
    VariableReader,
)
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.selectors import Selector, template_selectors
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.tool.providers import ToolCall, capped, plugin_id, provider_for
from firstgate.nodes.values import render_text as render
from pydantic import Field, ValidationInfo, field_validator, model_validator

InputType = Literal["mixed", "variable", "constant"]
_INPUT_TYPES = ("mixed", "variable", "constant")
# Tools whose definitions live in a Dify database, not in the export.
_DATABASE_PROVIDERS = ("app", "dataset-retrieval")
FIXED_OUTPUTS = frozenset({"text", "files", "json"})


def _is_selector(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) >= 2
        and all(isinstance(part, str) and part for part in value)
    )


class ToolInput(DslModel):
    type: InputType
    value: Any = None

    @model_validator(mode="after")
    def _value_fits_type(self) -> ToolInput:
        value = self.value
        if value is None:
            return self
        if self.type == "mixed" and not isinstance(value, str):
            expected = "a text template"
        elif self.type == "variable" and not _is_selector(value):
            expected = "a variable selector like [node_id, variable]"
        elif self.type == "constant" and not isinstance(
            value, str | int | float | bool | dict | list
        ):
            expected = "text, a number, a boolean, an object or a list"
        else:
            return self
        raise dsl_error(
            "dsl.tool.inputValue",
            "a {type} input must be {expected}, got {got}",
            type=self.type,
            expected=expected,
            got=shown(value)[:80],
        )


def _as_input(value: Any) -> ToolInput | None:
    """A `tool_configurations` entry in the `{type, value}` shape, else None."""
    if isinstance(value, Mapping) and value.get("type") in _INPUT_TYPES and "value" in value:
        return ToolInput.model_validate(dict(value))
    return None


def check_provider(
    provider_type: str,
    provider_id: str,
    provider_name: str,
    tool_name: str,
    *,
    sections: Sections | None = None,
) -> None:
    """Refuse, by name, a tool this runtime cannot run (a Dify database tool the
    runtime settings do not define, a built-in provider that is not built in
    here, a built-in tool it lacks)."""
    provider = provider_name or provider_id
    sections = sections or Sections()
    tools = sections.get(ToolsSettings)
    if provider_type == "api":
        _check_api_tool(provider, provider_id, tool_name, tools)
        return
    if provider_type == "workflow":
        if provider_id not in tools.workflow_providers:
            raise dsl_error(
                "dsl.tool.workflowNeedsDefinition",
                "the tool provider {provider} is a Dify workflow tool, defined in a Dify "
                "database and not in the export: name its workflow file in the runtime "
                "settings (tools.workflow_providers.{id}) to run it",
                provider=provider,
                id=provider_id,
            )
        return
    if provider_type in _DATABASE_PROVIDERS:
        raise dsl_error(
            "dsl.tool.databaseProvider",
            "the tool provider {provider} is a Dify {kind} tool, defined in a Dify "
            "database and not in the export: it cannot run here",
            provider=provider,
            kind=provider_type,
        )
    if provider_type != "builtin":
        return
    local = builtin_tools.provider(provider_id)
    if local is not None and tool_name not in local:
        raise dsl_error(
            "dsl.tool.unknownTool",
            "the built-in tool provider {provider} has no tool {tool} (it has {tools})",
            provider=provider,
            tool=tool_name,
            tools=", ".join(sorted(local)),
        )
    if local is None and "/" not in provider_id:
        plugin = plugin_id(provider_id)
        if plugin is not None:
            # Dify 1.x runs an older export's built-in as a plugin: so do we, through
            # the plugin daemon.
            # Loaded without settings, the run names the missing daemon instead.
            if not sections.loaded or tools.plugin_daemon is not None:
                return
            raise dsl_error(
                "dsl.tool.builtinNeedsDaemon",
                "the built-in tool provider {provider} runs as the plugin {plugin}, as in "
                "Dify 1.x: add a plugin daemon to the runtime settings (tools.plugin_daemon) "
                "to run it",
                provider=provider,
                plugin=plugin,
            )
        raise dsl_error(
            "dsl.tool.builtinUnavailable",
            "the built-in tool provider {provider} is not available here (built in: "
            "{builtin}); a plugin's tools are named org/plugin/provider",
            provider=provider,
            builtin=", ".join(sorted(builtin_tools.PROVIDERS)),
        )


def _check_api_tool(provider: str, provider_id: str, tool_name: str, tools: ToolsSettings) -> None:
    """An `api` tool runs when the settings name its OpenAPI document."""
    spec = tools.api_providers.get(provider_id)
    if spec is None:
        raise dsl_error(
            "dsl.tool.apiNeedsDefinition",
            "the tool provider {provider} is a Dify api tool, defined in a Dify database "
            "and not in the export: name its OpenAPI document in the runtime settings "
            "(tools.api_providers.{id}) to run it",
            provider=provider,
            id=provider_id,
        )
    _, operations = parse_openapi(spec.document, provider_id)
    if tool_name not in operations:
        raise dsl_error(
            "dsl.tool.unknownOperation",
            "the OpenAPI document of {provider} has no operation {tool} (it has {tools})",
            provider=provider,
            tool=tool_name,
            tools=", ".join(sorted(operations)) or "(none)",
        )


class Data(BaseNodeData):
    provider_id: str = Field(min_length=1)
    provider_type: Literal[
        "builtin", "plugin", "mcp", "api", "workflow", "app", "dataset-retrieval"
    ] = "builtin"
    provider_name: str = ""
    tool_name: str = Field(min_length=1)
    tool_label: str = ""
    tool_configurations: dict[str, Any] = Field(default_factory=dict)
    tool_parameters: dict[str, ToolInput] = Field(default_factory=dict)
    tool_node_version: str | None = None
    output_schema: dict[str, Any] | None = None

    @field_validator("tool_parameters", mode="before")
    @classmethod
    def _drop_empty_inputs(cls, value: Any, info: ValidationInfo) -> Any:
        # The editor leaves unset parameters as null (or with a null value).
        if not isinstance(value, Mapping):
            return value
        kept = {
            k: v
            for k, v in value.items()
            if v is not None and not (isinstance(v, Mapping) and v.get("value") is None)
        }
        for name, entry in kept.items():
            if isinstance(entry, str):  # older exports: a bare template, as Dify reads it
                note_warning(info.context, "dsl.warning.bareToolParameter", name=name)
                kept[name] = {"type": "mixed", "value": entry}
        return kept

    @field_validator("tool_configurations", mode="before")
    @classmethod
    def _configurations(cls, value: Any) -> Any:
        if value is None:
            return {}
        if isinstance(value, Mapping):
            for entry in value.values():
                _as_input(entry)  # a {type, value} entry is checked like a parameter
        return value

    @model_validator(mode="after")
    def _provider_runs_here(self, info: ValidationInfo) -> Data:
        check_provider(
            self.provider_type,
            self.provider_id,
            self.provider_name,
            self.tool_name,
            sections=context_sections(info),
        )
        return self

    @property
    def runs_locally(self) -> bool:
        return (
            self.provider_type == "builtin" and builtin_tools.provider(self.provider_id) is not None
        )


def _inputs(data: Data) -> list[ToolInput]:
    found = list(data.tool_parameters.values())
    for entry in data.tool_configurations.values():
        parsed = _as_input(entry)
        if parsed is not None:
            found.append(parsed)
    return found


def selectors(data: Data) -> list[Selector]:
    found: list[Selector] = []
    for item in _inputs(data):
        if item.type == "variable" and item.value is not None:
            found.append(tuple(item.value))
        elif isinstance(item.value, str):
            found.extend(template_selectors(item.value))
    return found


def output_names(data: Data) -> set[str]:
    names = set(FIXED_OUTPUTS)
    properties = (data.output_schema or {}).get("properties")
    if isinstance(properties, Mapping):
        names.update(str(name) for name in properties)
    if data.provider_type not in ("api", "workflow") and not data.runs_locally:
        names.add(ANY_OUTPUT)  # a plugin or MCP tool may set variables of its own
    return names


def needs(data: Data) -> Needs:
    # Its text goes out chunk by chunk as the tool sends it (Dify streams [node, "text"]).
    return Needs(streams=frozenset({"text"}))


# --- the call -------------------------------------------------------------------------


def _value(item: ToolInput, variables: VariableReader) -> Any:
    if item.type == "variable":
        return variables.get(tuple(item.value))
    if isinstance(item.value, str):
        return render(item.value, variables)
    return item.value


def arguments(data: Data, variables: VariableReader) -> dict[str, Any]:
    """The tool's arguments: its settings, then its parameters (which win).

    A parameter whose variable is unset is left out (the tool's own
    declarations then say whether it was required); a setting that names an
    unset variable is an error, as in Dify.
    """
    values: dict[str, Any] = {}
    for name, entry in data.tool_configurations.items():
        item = _as_input(entry)
        if item is None:
            if entry is not None and entry != "":  # empty: the tool's default
                values[name] = entry
            continue
        if item.value is None:
            continue
        value = _value(item, variables)
        if value is None and item.type == "variable":
            raise NodeRunError(
                "errors.tool.unsetVariable", name=name, selector=".".join(item.value)
            )
        values[name] = value
    for name, item in data.tool_parameters.items():
        value = _value(item, variables)
        if value is not None:
            values[name] = value
    return values


@dataclass(slots=True)
class _Collected:
    text: list[str] = field(default_factory=list)
    files: list[File] = field(default_factory=list)
    json: list[Any] = field(default_factory=list)
    variables: dict[str, Any] = field(default_factory=dict)

    def outputs(self) -> dict[str, Any]:
        return {
            "text": "".join(self.text),
            "files": self.files,
            "json": self.json or [{"data": []}],
            **self.variables,
        }


def collect(messages: Iterable[ToolMessage], ctx: NodeContext) -> dict[str, Any]:
    """Dify's outputs from a tool's messages, streaming text as it comes."""
    got = _Collected()

    def say(piece: str) -> None:
        got.text.append(piece)
        ctx.emit_chunk(piece)

    for message in messages:
        kind = message.type
        if kind is MessageType.TEXT:
            say(message.text)
        elif kind is MessageType.LINK:
            say(f"Link: {message.text}\n")
        elif kind in (MessageType.IMAGE, MessageType.IMAGE_LINK, MessageType.BINARY_LINK):
            got.files.append(from_remote_url(message.text))
        elif kind is MessageType.BLOB:
            directory = ctx.connectors.files_dir() if ctx.connectors else None
            if directory is None:
                raise NodeRunError("errors.connector.missing")
            got.files.append(
                from_bytes(
                    message.blob,
                    mime_type=message.mime_type,
                    directory=directory,
                    filename=message.filename,
                )
            )
        elif kind is MessageType.JSON:
            if message.json:
                got.json.append(message.json)
        elif kind is MessageType.VARIABLE:
            if message.stream:
                got.variables[message.name] = got.variables.get(message.name, "") + message.value
            else:
                got.variables[message.name] = message.value
        elif kind is MessageType.FILE:
            if isinstance(message.meta.get("file"), File):  # in-process: a workflow tool's
                got.files.append(message.meta["file"])
        # log and retriever-resource messages carry nothing into the outputs
    return got.outputs()


def run(data: Data, ctx: NodeContext) -> NodeResult:
    if ctx.connectors is None:
        raise NodeRunError("errors.connector.missing")
    tools = ctx.connectors.tools
    timeout_s, max_file_bytes = tools.timeout_s, tools.max_file_bytes
    values = arguments(data, ctx.variables)
    provider = provider_for(data.provider_type, data.provider_id, ctx.connectors)
    messages = provider.invoke(ToolCall(data.tool_name, values, timeout_s, ctx.cancel))
    # Closed here, on every path: a stream holds a socket and its deadline.
    with contextlib.closing(capped(messages, max_file_bytes)) as stream:
        outputs = collect(stream, ctx)
    return NodeResult(
        outputs=outputs,
        process_data={
            "tool_info": {
                "provider_type": data.provider_type,
                "provider_id": data.provider_id,
                "tool_name": data.tool_name,
            },
            "parameters": values,
        },
    )


def _never_twice(data: Any) -> bool:
    """Its effect is outside the run (a tool call; code that may reach the network
    through a sandbox service): a crash while it ran must not repeat it."""
    return False


SPEC = NodeSpec(
    type="tool",
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=True,
    needs=needs,
    repeatable=_never_twice,
)
