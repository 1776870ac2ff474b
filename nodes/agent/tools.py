"""An agent node's tools: the entries of its `tools` parameter as the model
sees them (a function name, a description, a JSON schema of the arguments
it fills) and as they run (through the one tool interface,
`nodes.tool_providers`: a built-in tool, an MCP server's tool, or a plugin's
tool through the daemon).

An entry (Dify's export): `provider_name` (or `provider_id`), `type`
(builtin / plugin / mcp; api and workflow tools live in a Dify database and
are refused by name), `tool_name`, `enabled`, `parameters` (`{name: {auto,
value}}`: `auto: 1` lets the model fill the parameter, `auto: 0` fixes
`value`), `settings` (fixed values), `schemas` (the tool's parameter
declarations: `name`, `type`, `form` llm/form, `llm_description`,
`required`, `options`), `extra.description`.

What the model fills: the parameters the `schemas` declare with `form: llm`
that are not fixed; without `schemas`, a built-in tool's own declarations,
an MCP tool's input schema; otherwise any object. A tool's answer goes back
to the model as text (`observation`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from firstgate.common.dsl import DslModel
from firstgate.common.files import File, from_bytes
from firstgate.common.sections import context_sections
from firstgate.connectors import builtin_tools
from firstgate.connectors.tool_messages import MessageType, ToolError, ToolMessage
from firstgate.connectors.tool_parameters import ParamType, ToolParameter
from firstgate.nodes.base import NodeContext, VariableReader
from firstgate.nodes.tool import check_provider
from firstgate.nodes.tool.providers import ToolCall, capped, provider_for
from firstgate.nodes.values import render_text
from firstgate.plugin_daemon_client.protocols import ToolSpec
from pydantic import Field, ValidationInfo, field_validator, model_validator

# JSON schema types of Dify's tool parameter types (files cannot come from a model).
_JSON_TYPES = {
    "string": "string",
    "secret-input": "string",
    "select": "string",
    "text-input": "string",
    "paragraph": "string",
    "number": "number",
    "boolean": "boolean",
    "array": "array",
    "object": "object",
}
# A tool's answer as the model reads it is cut to this many characters.
MAX_OBSERVATION_CHARS = 16_000


class ToolEntry(DslModel):
    provider_name: str = ""
    provider_id: str = ""
    type: str = Field(default="builtin", alias="type")
    tool_name: str = Field(min_length=1)
    tool_label: str = ""
    tool_description: str = ""
    enabled: bool = True
    parameters: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    schemas: list[dict[str, Any]] = Field(default_factory=list)
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("parameters", "settings", "extra", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("schemas", mode="before")
    @classmethod
    def _no_schemas(cls, value: Any) -> Any:
        return [] if value is None else value

    @model_validator(mode="after")
    def _runs_here(self, info: ValidationInfo) -> ToolEntry:
        if self.enabled:
            check_provider(
                self.type,
                self.provider,
                self.provider_name,
                self.tool_name,
                sections=context_sections(info),
            )
        return self

    @property
    def provider(self) -> str:
        return self.provider_id or self.provider_name

    @property
    def description(self) -> str:
        described = self.extra.get("description") if isinstance(self.extra, dict) else None
        return str(described or self.tool_description or self.tool_label or self.tool_name)


def _fixed(entry: ToolEntry, variables: VariableReader) -> dict[str, Any]:
    """Values the workflow fixes: `settings`, and parameters with `auto: 0`."""
    values: dict[str, Any] = {}
    for source in (entry.settings, entry.parameters):
        for name, raw in source.items():
            if isinstance(raw, Mapping):
                if raw.get("auto") in (1, True):
                    continue
                raw = raw.get("value")
                if isinstance(raw, Mapping) and "value" in raw:  # {type, value} input
                    raw = raw.get("value")
            if raw is None:
                continue
            values[name] = render_text(raw, variables) if isinstance(raw, str) else raw
    return values


def _declared(entry: ToolEntry) -> list[ToolParameter]:
    """The tool's parameters from the export's `schemas`, else a built-in's own."""
    if entry.schemas:
        found: list[ToolParameter] = []
        for spec in entry.schemas:
            name = spec.get("name")
            if not isinstance(name, str) or not name:
                continue
            options = tuple(
                str(o.get("value")) if isinstance(o, Mapping) else str(o)
                for o in spec.get("options") or ()
            )
            try:
                kind = ParamType(str(spec.get("type") or "string"))
            except ValueError:
                kind = ParamType.ANY
            found.append(
                ToolParameter(
                    name,
                    kind,
                    bool(spec.get("required")),
                    spec.get("default"),
                    str(spec.get("form") or "llm"),
                    options,
                )
            )
        return found
    local = builtin_tools.provider(entry.provider)
    tool = local.get(entry.tool_name) if local else None
    return list(tool.parameters) if tool is not None else []


def _descriptions(entry: ToolEntry) -> dict[str, str]:
    found: dict[str, str] = {}
    for spec in entry.schemas:
        text = spec.get("llm_description") or spec.get("human_description")
        if isinstance(text, Mapping):
            text = text.get("en_US") or next(iter(text.values()), "")
        if isinstance(spec.get("name"), str) and text:
            found[spec["name"]] = str(text)
    return found


def arguments_schema(entry: ToolEntry, fixed: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON schema of what the model fills for this tool."""
    declared = [p for p in _declared(entry) if p.form == "llm" and p.name not in fixed]
    if not declared and not entry.schemas and builtin_tools.provider(entry.provider) is None:
        return {"type": "object"}  # nothing known: the tool checks its own arguments
    descriptions = _descriptions(entry)
    properties: dict[str, Any] = {}
    for parameter in declared:
        kind = _JSON_TYPES.get(parameter.type.value)
        if kind is None and parameter.type in (ParamType.FILE, ParamType.FILES):
            continue
        spec: dict[str, Any] = {} if kind is None else {"type": kind}
        if parameter.name in descriptions:
            spec["description"] = descriptions[parameter.name]
        if parameter.options:
            spec["enum"] = list(parameter.options)
        properties[parameter.name] = spec
    required = [p.name for p in declared if p.required and p.name in properties]
    return {"type": "object", "properties": properties, "required": required}


@dataclass(slots=True)
class BoundTool:
    """One tool an agent may call, ready to run."""

    entry: ToolEntry
    spec: ToolSpec
    fixed: dict[str, Any]


@dataclass(slots=True)
class ToolRun:
    """What one call of a tool produced."""

    observation: str
    files: list[File] = field(default_factory=list)
    json: list[Any] = field(default_factory=list)
    error: str | None = None


def bind(entries: Iterable[ToolEntry], variables: VariableReader) -> dict[str, BoundTool]:
    """The enabled tools, by the function name the model calls them with."""
    tools: dict[str, BoundTool] = {}
    for entry in entries:
        if not entry.enabled:
            continue
        fixed = _fixed(entry, variables)
        spec = ToolSpec(entry.tool_name, entry.description, arguments_schema(entry, fixed))
        tools[entry.tool_name] = BoundTool(entry, spec, fixed)
    return tools


def call(tool: BoundTool, arguments: Mapping[str, Any], ctx: NodeContext) -> ToolRun:
    """Run the tool; a tool's failure becomes its observation (the model reads
    it and may try again), as in Dify's agents."""
    if ctx.connectors is None:
        return ToolRun(observation="", error="no connectors")
    tools = ctx.connectors.tools
    timeout_s, max_file = tools.timeout_s, tools.max_file_bytes
    values = {**dict(arguments), **tool.fixed}
    entry = tool.entry
    try:
        provider = provider_for(entry.type, entry.provider, ctx.connectors)
        messages = provider.invoke(ToolCall(entry.tool_name, values, timeout_s, ctx.cancel))
        with contextlib.closing(capped(messages, max_file)) as stream:
            return _observe(stream, ctx)
    except ToolError as failed:
        return ToolRun(observation=f"tool error: {failed}", error=str(failed))


def _observe(messages: Iterable[ToolMessage], ctx: NodeContext) -> ToolRun:
    run = ToolRun(observation="")
    parts: list[str] = []
    for message in messages:
        kind = message.type
        if kind is MessageType.TEXT:
            parts.append(message.text)
        elif kind is MessageType.LINK:
            parts.append(f"link: {message.text}\n")
        elif kind is MessageType.JSON and message.json is not None:
            run.json.append(message.json)
            if not message.suppress_output:
                parts.append(json.dumps(message.json, ensure_ascii=False))
        elif kind in (MessageType.IMAGE, MessageType.IMAGE_LINK, MessageType.BINARY_LINK):
            parts.append(f"a file was produced and shown to the user: {message.text}\n")
        elif kind is MessageType.BLOB:
            directory = ctx.connectors.files_dir() if ctx.connectors else None
            if directory is not None:
                produced = from_bytes(
                    message.blob,
                    mime_type=message.mime_type,
                    directory=directory,
                    filename=message.filename,
                )
                run.files.append(produced)
                parts.append(f"a file was produced and shown to the user: {produced.filename}\n")
        elif kind is MessageType.VARIABLE:
            parts.append(f"{message.name}: {message.value}\n")
    text = "".join(parts)
    run.observation = text if len(text) <= MAX_OBSERVATION_CHARS else text[:MAX_OBSERVATION_CHARS]
    return run
