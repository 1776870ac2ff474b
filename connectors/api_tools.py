"""Custom API tools (Dify's `api` provider type) from an OpenAPI 3 document
the operator names in the runtime settings: each operation is a tool, named
by its `operationId` (else `<method>_<path>` as Dify names one without).

A call puts each argument where the operation declares it (path, query,
header, cookie; the rest into a JSON or form body of the request body's
properties), adds the provider's key as the settings say (a header, plain
or `Bearer`/`Basic`, or a query parameter), and sends it through the guarded
HTTP client opened for exactly the document's server (an operator's
endpoint, so it is trusted; the total deadline, cancel and size caps still
apply). A 2xx JSON object answer is a json message plus the raw text, any
other 2xx answer text (Dify's shapes); any other status fails the call.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from firstgate.common.cancel import Cancellable
from firstgate.common.redaction import safe_url
from firstgate.connectors.guarded_http import GuardedHttp, HttpLimits, RequestSpec, Timeouts
from firstgate.connectors.net_policy import NetworkPolicy
from firstgate.connectors.tool_messages import ToolError, ToolMessage, json_message, text
from firstgate.connectors.tool_parameters import ParamType, ToolParameter, prepare, schema_type

_METHODS = ("get", "post", "put", "patch", "delete", "head", "options")


class ApiSchemaError(ToolError):
    message_key = "errors.tool.apiSchema"


@dataclass(frozen=True, slots=True)
class ApiAuth:
    """Where the provider's key goes: `none`, a `header` (with `prefix`
    `bearer`, `basic` or `custom`: sent as written) or a `query` parameter."""

    type: str = "none"
    name: str = ""
    prefix: str = "custom"
    key: str = ""


@dataclass(frozen=True, slots=True)
class _Param:
    name: str
    location: str  # path | query | header | cookie | body
    required: bool
    kind: ParamType
    default: Any = None


@dataclass(frozen=True, slots=True)
class ApiOperation:
    name: str
    method: str
    path: str
    params: tuple[_Param, ...]
    body_type: str = ""  # "json", "form" or "" (no body)

    def declared(self) -> list[ToolParameter]:
        return [ToolParameter(p.name, p.kind, p.required, p.default) for p in self.params]


def _resolve(document: Mapping[str, Any], node: Any, depth: int = 0) -> Any:
    """A local `$ref` (`#/components/...`), followed at most a few levels."""
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str) and depth < 8:
        target: Any = document
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        node, depth = target, depth + 1
    return node


def _operation_name(method: str, path: str, operation: Mapping[str, Any]) -> str:
    name = operation.get("operationId")
    if isinstance(name, str) and name:
        return name
    return f"{method}_{re.sub(r'[^A-Za-z0-9_]+', '_', path).strip('_')}"


def _body(document: Mapping[str, Any], operation: Mapping[str, Any]) -> tuple[str, list[_Param]]:
    body = _resolve(document, operation.get("requestBody"))
    content = body.get("content") if isinstance(body, Mapping) else None
    if not isinstance(content, Mapping) or not content:
        return "", []
    media = next(
        (m for m in content if "json" in m),
        next((m for m in content if "form" in m), next(iter(content))),
    )
    schema = _resolve(document, (content.get(media) or {}).get("schema"))
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    required = set(schema.get("required") or ()) if isinstance(schema, Mapping) else set()
    params = [
        _Param(str(name), "body", name in required, schema_type(_resolve(document, prop)),
               (prop or {}).get("default") if isinstance(prop, Mapping) else None)
        for name, prop in (properties or {}).items()
    ]  # fmt: skip
    return ("json" if "json" in media else "form"), params


def parse_openapi(document: Any, provider: str) -> tuple[str, dict[str, ApiOperation]]:
    """The server URL and the operations of an OpenAPI 3 document."""
    if not isinstance(document, Mapping) or not isinstance(document.get("paths"), Mapping):
        raise ApiSchemaError(provider=provider, detail="not an OpenAPI document with paths")
    servers = document.get("servers")
    url = servers[0].get("url") if isinstance(servers, list) and servers else None
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        raise ApiSchemaError(provider=provider, detail="servers[0].url is not an http(s) URL")
    operations: dict[str, ApiOperation] = {}
    for path, item in document["paths"].items():
        if not isinstance(item, Mapping):
            continue
        shared = item.get("parameters") or []
        for method in _METHODS:
            operation = item.get(method)
            if not isinstance(operation, Mapping):
                continue
            params = []
            for raw in [*shared, *(operation.get("parameters") or [])]:
                param = _resolve(document, raw)
                if not isinstance(param, Mapping) or not param.get("name"):
                    continue
                schema = _resolve(document, param.get("schema"))
                default = schema.get("default") if isinstance(schema, Mapping) else None
                params.append(
                    _Param(str(param["name"]), str(param.get("in", "query")),
                           bool(param.get("required")), schema_type(schema), default)
                )  # fmt: skip
            body_type, body_params = _body(document, operation)
            name = _operation_name(method, str(path), operation)
            operations[name] = ApiOperation(
                name, method, str(path), (*params, *body_params), body_type
            )
    return url.rstrip("/"), operations


@dataclass
class ApiProvider:
    provider_id: str
    server_url: str
    operations: dict[str, ApiOperation]
    auth: ApiAuth = field(default_factory=ApiAuth)
    limits: HttpLimits = field(default_factory=HttpLimits)
    _http: GuardedHttp | None = field(default=None, init=False, repr=False)

    @classmethod
    def from_document(
        cls,
        provider_id: str,
        document: Any,
        auth: ApiAuth | None = None,
        limits: HttpLimits | None = None,
    ) -> ApiProvider:
        url, operations = parse_openapi(document, provider_id)
        return cls(provider_id, url, operations, auth or ApiAuth(), limits or HttpLimits())

    @property
    def http(self) -> GuardedHttp:
        if self._http is None:
            parts = urlsplit(self.server_url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            # The operator named this server: open exactly it, nothing else.
            self._http = GuardedHttp(NetworkPolicy([f"{parts.hostname}:{port}"]), self.limits)
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()

    def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        timeout_s: float,
        cancel: Cancellable | None = None,
    ) -> list[ToolMessage]:
        operation = self.operations.get(tool)
        if operation is None:
            raise ToolError("errors.tool.unknownTool", tool=tool, provider=self.provider_id)
        values = prepare(operation.declared(), arguments)
        spec = self._request(operation, values)
        reply = self.http.request(spec, timeouts=_within(timeout_s), cancel=cancel)
        if not reply.is_success:
            raise ToolError(
                "errors.tool.apiStatus",
                tool=tool,
                status=reply.status_code,
                detail=self._hide(reply.text[:300]),
            )
        try:
            decoded = json.loads(reply.text) if "json" in reply.content_type else None
        except (ValueError, RecursionError):
            decoded = None
        if isinstance(decoded, dict):
            return [json_message(decoded), text(reply.text)]
        return [text(reply.text)]

    def _request(self, operation: ApiOperation, values: Mapping[str, Any]) -> RequestSpec:
        path = operation.path
        query: list[tuple[str, str]] = []
        headers: dict[str, str] = {}
        cookies: list[str] = []
        body: dict[str, Any] = {}
        for param in operation.params:
            if param.name not in values:
                continue
            value = values[param.name]
            shown = value if isinstance(value, str) else json.dumps(value)
            if param.location == "path":
                path = path.replace("{" + param.name + "}", quote(shown, safe=""))
            elif param.location == "query":
                query.append((param.name, shown))
            elif param.location == "header":
                headers[param.name] = shown
            elif param.location == "cookie":
                cookies.append(f"{param.name}={quote(shown, safe='')}")
            else:
                body[param.name] = value
        if cookies:
            headers["Cookie"] = "; ".join(cookies)
        auth = self.auth
        if auth.type == "header" and auth.key:
            headers[auth.name or "Authorization"] = _header_value(auth)
        elif auth.type == "query" and auth.key:
            query.append((auth.name or "key", auth.key))
        spec = RequestSpec(
            method=operation.method,
            url=self.server_url + path,
            headers=headers,
            params=query or None,
        )
        if operation.body_type == "json":
            spec.json = body
        elif operation.body_type == "form":
            spec.data = {k: v if isinstance(v, str) else json.dumps(v) for k, v in body.items()}
        return spec

    def _hide(self, value: str) -> str:
        key = self.auth.key
        return value.replace(key, "******") if key and len(key) >= 4 else value

    def __repr__(self) -> str:  # the key is never shown
        return f"ApiProvider({self.provider_id!r}, {safe_url(self.server_url)!r})"


def _within(total_s: float) -> Timeouts:
    """Timeouts whose sum, the request's total deadline, is the tool's time bound."""
    connect = min(10.0, total_s / 3)
    write = min(30.0, total_s / 3)
    return Timeouts(connect=connect, write=write, read=total_s - connect - write)


def _header_value(auth: ApiAuth) -> str:
    if auth.prefix == "bearer":
        return f"Bearer {auth.key}"
    if auth.prefix == "basic":
        return "Basic " + base64.b64encode(auth.key.encode()).decode()
    return auth.key
