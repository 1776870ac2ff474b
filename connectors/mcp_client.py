"""Tools of a Model Context Protocol server (streamable HTTP), through the
maintained `mcp` package: listed once per process, arguments cast and checked
against each tool's input schema before the call, called with a time bound,
and the result turned into Dify's tool messages the way Dify's MCP tool does
(text that is a JSON object becomes a json message, images and blobs become
blobs, structured content becomes variables when the tool declares an output
schema). A result the server marks as an error fails the call.

The servers are named in the runtime settings (trusted endpoints, not under
the http-request allow-list); header values come from environment variables.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from firstgate.common.cancel import Cancellable
from firstgate.common.redaction import safe_url
from firstgate.connectors.async_call import CallCancelled, CallTimedOut, run_async
from firstgate.connectors.tool_messages import (
    ToolCancelledError,
    ToolError,
    ToolMessage,
    ToolTimeoutError,
    blob,
    json_message,
    text,
    variable,
)
from firstgate.connectors.tool_parameters import (
    ParamType,
    ToolParameter,
    ToolParameterError,
    cast,
    schema_type,
)


@dataclass(frozen=True, slots=True)
class McpTool:
    name: str
    input_schema: Mapping[str, Any]
    has_output_schema: bool

    def parameters(self) -> list[ToolParameter]:
        properties = self.input_schema.get("properties")
        required = set(self.input_schema.get("required") or ())
        found: list[ToolParameter] = []
        for name, schema in (properties if isinstance(properties, Mapping) else {}).items():
            found.append(ToolParameter(str(name), schema_type(schema), name in required))
        return found


# A call's time bound unless the settings give the server another (`tools.mcp_servers`).
DEFAULT_TIMEOUT_S = 60.0


class McpServer:
    """One configured server; safe to share between threads and greenlets."""

    def __init__(
        self,
        server_id: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        max_file_bytes: int,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.server_id = server_id
        self.url = url
        self._headers = dict(headers or {})
        self.timeout_s = timeout_s
        self.max_file_bytes = max_file_bytes
        self._tools: dict[str, McpTool] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # header values (tokens) are never shown
        return f"McpServer({self.server_id!r}, {safe_url(self.url)!r})"

    # --- the calls -----------------------------------------------------------

    def tools(self, *, cancel: Cancellable | None = None) -> dict[str, McpTool]:
        """The server's tools, listed on first use and kept for the process."""
        with self._lock:
            if self._tools is not None:
                return self._tools
        listed = self._run(self._list, self.timeout_s, cancel, "list")
        with self._lock:
            self._tools = listed
        return listed

    def call(
        self,
        tool_name: str,
        arguments: Mapping[str, Any],
        *,
        timeout_s: float | None = None,
        cancel: Cancellable | None = None,
    ) -> list[ToolMessage]:
        """Call a tool; arguments are cast and validated against its schema first."""
        tool = self.tools(cancel=cancel).get(tool_name)
        if tool is None:
            raise ToolError(
                "errors.tool.unknownTool", tool=tool_name, provider=f"MCP server {self.server_id}"
            )
        checked = self.check_arguments(tool, arguments)
        budget = min(timeout_s or self.timeout_s, self.timeout_s)
        result = self._run(lambda client: self._call(client, tool_name, checked), budget, cancel)
        return list(self._messages(tool, result))

    def check_arguments(self, tool: McpTool, arguments: Mapping[str, Any]) -> dict[str, Any]:
        # Dify drops empty values before an MCP call.
        values = {
            k: v
            for k, v in arguments.items()
            if v is not None and not (isinstance(v, str) and not v.strip())
        }
        for parameter in tool.parameters():
            if parameter.name in values and parameter.type is not ParamType.ANY:
                values[parameter.name] = cast(parameter, values[parameter.name])
        _validate(tool, values)
        return values

    # --- plumbing --------------------------------------------------------------

    def _run(
        self, step: Any, timeout_s: float, cancel: Cancellable | None, what: str = "call"
    ) -> Any:
        async def session() -> Any:
            import httpx2
            from mcp import Client
            from mcp.client.streamable_http import streamable_http_client

            async with httpx2.AsyncClient(
                headers=self._headers, timeout=httpx2.Timeout(timeout_s)
            ) as http:
                transport = streamable_http_client(self.url, http_client=http)
                async with Client(transport, read_timeout_seconds=timeout_s) as client:
                    return await step(client)

        try:
            return run_async(session, timeout_s=timeout_s, cancel=cancel)
        except CallTimedOut:
            raise ToolTimeoutError(seconds=_seconds(timeout_s)) from None
        except CallCancelled:
            raise ToolCancelledError() from None
        except ToolError:
            raise
        except Exception as exc:  # noqa: BLE001 - the mcp package raises many kinds
            detail = _detail(exc)
        raise ToolError(
            "errors.tool.mcpFailed", server=self.server_id, url=safe_url(self.url), detail=detail
        )

    @staticmethod
    async def _list(client: Any) -> dict[str, McpTool]:
        tools: dict[str, McpTool] = {}
        cursor = None
        for _ in range(100):  # a paginator that never ends cannot hang the node
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                schema = tool.input_schema if isinstance(tool.input_schema, Mapping) else {}
                tools[tool.name] = McpTool(tool.name, dict(schema), bool(tool.output_schema))
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    @staticmethod
    async def _call(client: Any, name: str, arguments: dict[str, Any]) -> Any:
        return await client.call_tool(name, arguments)

    def _messages(self, tool: McpTool, result: Any) -> Iterator[ToolMessage]:
        if getattr(result, "is_error", False):
            raise ToolError(
                "errors.tool.reportedError", tool=tool.name, detail=_result_text(result)[:500]
            )
        for content in result.content:
            yield from self._content(content)
        structured = getattr(result, "structured_content", None)
        if tool.has_output_schema and isinstance(structured, Mapping):
            for key, value in structured.items():
                yield variable(str(key), value)

    def _content(self, content: Any) -> Iterator[ToolMessage]:
        kind = getattr(content, "type", None)
        if kind == "text":
            yield from _text_content(content.text)
        elif kind in ("image", "audio"):
            yield self._blob(content.data, content.mime_type)
        elif kind == "resource":
            resource = content.resource
            if hasattr(resource, "text"):
                yield text(resource.text)
            else:
                mime = getattr(resource, "mime_type", None) or "application/octet-stream"
                yield self._blob(resource.blob, mime)
        # Other content (resource links) is not part of Dify's tool output.

    def _blob(self, data: str, mime_type: str) -> ToolMessage:
        if len(data) * 3 // 4 > self.max_file_bytes:
            raise ToolError("errors.tool.fileTooLarge", limit=self.max_file_bytes)
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ToolError(
                "errors.tool.mcpFailed",
                server=self.server_id,
                url=safe_url(self.url),
                detail="a binary content block is not base64",
            ) from None
        return blob(raw, mime_type)


def _text_content(value: str) -> Iterator[ToolMessage]:
    """Dify's rule: text that is a JSON object (or a list of objects) is JSON."""
    stripped = value.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        try:
            decoded = json.loads(stripped)
        except (ValueError, RecursionError):
            decoded = None
        if isinstance(decoded, dict):
            yield json_message(decoded)
            return
        if isinstance(decoded, list):
            if all(isinstance(item, dict) for item in decoded):
                for item in decoded:
                    yield json_message(item)
            else:
                yield text(str(decoded))
            return
    yield text(value)


def _result_text(result: Any) -> str:
    parts = [getattr(c, "text", "") for c in result.content if getattr(c, "type", "") == "text"]
    return "\n".join(p for p in parts if p) or "(no message)"


def _validate(tool: McpTool, values: dict[str, Any]) -> None:
    import jsonschema

    validator_cls = jsonschema.validators.validator_for(tool.input_schema)
    try:
        validator_cls.check_schema(tool.input_schema)
    except jsonschema.SchemaError:
        return  # the server's schema is broken: let the server judge the call
    error = jsonschema.exceptions.best_match(validator_cls(tool.input_schema).iter_errors(values))
    if error is None:
        return
    where = ".".join(str(p) for p in error.absolute_path) or "(arguments)"
    raise ToolParameterError(
        "errors.tool.schema", tool=tool.name, parameter=where, detail=error.message[:300]
    )


def _seconds(value: float) -> str:
    return f"{value:g}"


def _detail(exc: BaseException) -> str:
    """The innermost meaningful message (anyio wraps failures in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return (str(exc) or type(exc).__name__)[:300]
