"""HTTP-request node: Dify's fields and outputs, sent through the guarded client.

Fields: `method`, `url`, `headers` and `params` (one `key: value` per line,
with `{{#node.var#}}` selectors), `body` (`none`, `form-data`,
`x-www-form-urlencoded`, `json`, `raw-text`, `binary`), `authorization`
(`no-auth`, or `api-key` as bearer, basic or a custom header), `timeout`
(connect/read/write seconds, 0 or empty: Dify's maximum; values above the
maximum are clamped to it), `ssl_verify`. A `binary` body sends the bytes of
its one file variable; a form-data file field sends each file of its variable
as a part (both read up to `http_request.max_binary_bytes`; remote files are
fetched under the same network policy). Outputs: `status_code`, `body` (the
raw text, even for JSON; empty when the body became a file), `headers`,
`files` (a response Dify classifies as a file becomes a file object, written
to the settings' `files.dir`, within the binary size cap).

As in Dify, a status outside 2xx is a success with that status code, unless
the node retries or has an error strategy: then it is an
`HTTPResponseCodeError` that the retry or strategy handles.

Credentials never leave the node: the API key, `user:password@` in the URL
and the Authorization header are masked in `process_data` and in errors.
"""

from __future__ import annotations

import base64
import json
import mimetypes
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from firstgate.common.dsl import DslModel, dsl_error, shown
from firstgate.common.files import File, from_bytes
from firstgate.common.redaction import safe_url
from firstgate.connectors.errors import ConnectorError
from firstgate.connectors.guarded_http import (
    MAX_CONNECT_TIMEOUT_S,
    MAX_READ_TIMEOUT_S,
    MAX_WRITE_TIMEOUT_S,
    HttpReply,
    RequestSpec,
    Timeouts,
)
from firstgate.nodes.base import NodeContext, NodeResult, NodeRunError, VariableReader
from firstgate.nodes.config import BaseNodeData, OptionalSelector
from firstgate.nodes.file_content import read as read_file
from firstgate.nodes.selectors import Selector, template_selectors
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.values import render_text
from pydantic import BeforeValidator, Field, field_validator

METHODS = ("get", "post", "put", "patch", "delete", "head", "options")
BODY_CONTENT_TYPES = {
    "json": "application/json",
    "x-www-form-urlencoded": "application/x-www-form-urlencoded",
    "form-data": "multipart/form-data",
    "raw-text": "text/plain",
    "binary": "application/octet-stream",
}
MASK = "******"


def _method(value: Any) -> str:
    if not isinstance(value, str) or value.lower() not in METHODS:
        raise dsl_error(
            "dsl.choice",
            "must be one of {choices}, got {got}",
            choices=", ".join(METHODS),
            got=shown(value),
        )
    return value.lower()


class AuthConfig(DslModel):
    type: Literal["basic", "bearer", "custom"] = "bearer"
    api_key: str = ""
    header: str = ""


class Authorization(DslModel):
    type: Literal["no-auth", "api-key"] = "no-auth"
    config: AuthConfig | None = None


class BodyItem(DslModel):
    key: str = ""
    type: Literal["text", "file"] = "text"
    value: str = ""
    file: OptionalSelector = None


class Body(DslModel):
    type: Literal["none", "form-data", "x-www-form-urlencoded", "raw-text", "json", "binary"] = (
        "none"
    )
    data: list[BodyItem] = Field(default_factory=list)

    @field_validator("data", mode="before")
    @classmethod
    def _legacy_text(cls, value: Any) -> Any:
        # Older exports keep the raw body as one string.
        if not value:
            return []
        if isinstance(value, str):
            return [{"type": "text", "value": value}]
        return value


def _seconds(value: Any) -> int | None:
    if value in (None, ""):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise dsl_error(
            "dsl.http.timeout",
            "must be a number of seconds (0 or more), got {got}",
            got=shown(value),
        )
    return int(value)


Seconds = Annotated[int | None, BeforeValidator(_seconds)]


class Timeout(DslModel):
    connect: Seconds = None
    read: Seconds = None
    write: Seconds = None


class Data(BaseNodeData):
    method: Annotated[str, BeforeValidator(_method)] = "get"
    url: str = ""
    authorization: Authorization = Field(default_factory=Authorization)
    headers: str = ""
    params: str = ""
    body: Body | None = None
    timeout: Timeout | None = None
    ssl_verify: bool | None = None


def selectors(data: Data) -> list[Selector]:
    texts = [data.url, data.headers, data.params]
    if data.authorization.config is not None:
        texts.append(data.authorization.config.api_key)
    files: list[Selector] = []
    if data.body is not None and data.body.type != "none":
        for item in data.body.data:
            texts.append(item.key)
            if _is_file_item(data.body, item):
                if item.file is not None:
                    files.append(item.file)
            else:
                texts.append(item.value)
    return [s for text in texts for s in template_selectors(text)] + files


def _is_file_item(body: Body, item: BodyItem) -> bool:
    return body.type == "binary" or (body.type == "form-data" and item.type == "file")


def output_names(data: Data) -> set[str]:
    return {"status_code", "body", "headers", "files"}


class HTTPResponseCodeError(NodeRunError):
    """Dify's error type for a non-2xx status when the node retries or has a strategy."""

    def __init__(self, status: int) -> None:
        super().__init__("errors.http.status", status=status)


# --- building the request -------------------------------------------------------


def _lines(template: str, variables: VariableReader) -> list[tuple[str, str]]:
    """Dify's text-line format: `key: value` per line; `key` alone has an empty value.

    The lines are split *before* variables are substituted, as Dify does for
    params: a newline inside an input stays inside its value instead of adding
    a parameter or a header of its own.
    """
    pairs: list[tuple[str, str]] = []
    for line in template.splitlines():
        key, _, value = line.strip().partition(":")
        key = render_text(key.strip(), variables).strip()
        if key:
            pairs.append((key, render_text(value.strip(), variables).strip()))
    return pairs


def _header_lines(template: str, variables: VariableReader) -> dict[str, str]:
    """Header lines; CR and LF in a substituted name or value are dropped (no header
    can be added or overridden through an input, and none can be split)."""
    return {
        _no_line_breaks(key): _no_line_breaks(value) for key, value in _lines(template, variables)
    }


def _no_line_breaks(text: str) -> str:
    return text.replace("\r", "").replace("\n", "")


def _auth_header(auth: Authorization, api_key: str) -> dict[str, str]:
    if auth.type != "api-key" or auth.config is None:
        return {}
    header = auth.config.header or "Authorization"
    if auth.config.type == "bearer":
        return {header: f"Bearer {api_key}"}
    if auth.config.type == "basic":
        # Dify encodes `user:password`; anything else is sent as written.
        token = base64.b64encode(api_key.encode()).decode() if ":" in api_key else api_key
        return {header: f"Basic {token}"}
    return {header: api_key}


def _json_body(text: str) -> Any:
    from json_repair import repair_json

    try:
        return json.loads(repair_json(text), strict=False)
    except (ValueError, RecursionError):
        raise NodeRunError("errors.http.badJsonBody") from None


FileReader = Callable[[File], bytes]


def _no_files(file: File) -> bytes:
    raise NodeRunError("errors.connector.missing")


def _files_at(selector: Selector | None, variables: VariableReader) -> list[File]:
    value = variables.get(selector) if selector else None
    items = value if isinstance(value, list | tuple) else [value]
    return [item for item in items if isinstance(item, File)]


def _attach_files(
    spec: RequestSpec, body: Body, variables: VariableReader, read: FileReader
) -> None:
    """The file parts of a body: the one file of a `binary` body (required), or
    a form's file fields (a field whose variable is unset is left out)."""
    if body.type == "binary":
        if len(body.data) != 1:
            raise NodeRunError("errors.http.bodyItems", type=body.type)
        found = _files_at(body.data[0].file, variables)
        if not found:
            where = ".".join(body.data[0].file or ("?",))
            raise NodeRunError("errors.http.noFile", selector=where)
        spec.content = read(found[0])
        return
    parts = [
        (render_text(item.key, variables), file)
        for item in body.data
        if item.type == "file"
        for file in _files_at(item.file, variables)
    ]
    spec.files = [
        (key, (file.filename, read(file), file.mime_type or "application/octet-stream"))
        for key, file in parts
    ] or [("__multipart_placeholder__", ("", b"", "application/octet-stream"))]


def build_request(
    data: Data, variables: VariableReader, read: FileReader = _no_files
) -> tuple[RequestSpec, list[str]]:
    """The request to send, and the secrets that must never be shown. `read`
    gives a file variable's bytes (for `binary` and form-data file bodies)."""
    url = render_text(data.url, variables).strip()
    if not url:
        raise NodeRunError("errors.http.noUrl")
    secrets: list[str] = []
    api_key = ""
    if data.authorization.type == "api-key":
        if data.authorization.config is None:
            raise NodeRunError("errors.http.noApiKey")
        api_key = render_text(data.authorization.config.api_key, variables)
        if not api_key.strip():
            raise NodeRunError("errors.http.noApiKey")
        secrets.append(api_key)
    headers = _header_lines(data.headers, variables)
    auth = _auth_header(data.authorization, api_key)
    secrets.extend(auth.values())
    headers.update(auth)
    params = _lines(data.params, variables) or None
    spec = RequestSpec(method=data.method, url=url, headers=headers, params=params)
    body = data.body
    if body is None or body.type == "none":
        return spec, secrets
    if "content-type" not in {k.lower() for k in headers} and body.type in BODY_CONTENT_TYPES:
        # multipart needs the boundary httpx writes; it sets the header itself.
        if body.type != "form-data":
            headers["Content-Type"] = BODY_CONTENT_TYPES[body.type]
    if body.type in ("raw-text", "json"):
        if len(body.data) != 1:
            raise NodeRunError("errors.http.bodyItems", type=body.type)
        text = render_text(body.data[0].value, variables)
        if body.type == "json":
            spec.json = _json_body(text)
        else:
            spec.content = text
    elif body.type == "binary":
        _attach_files(spec, body, variables, read)
    else:  # x-www-form-urlencoded, form-data
        spec.data = {
            render_text(item.key, variables): render_text(item.value, variables)
            for item in body.data
            if item.type == "text"
        }
        if body.type == "form-data":
            # Always multipart, even without files (Dify sends a placeholder part).
            _attach_files(spec, body, variables, read)
    return spec, secrets


def timeouts(data: Data) -> Timeouts:
    t = data.timeout or Timeout()
    return Timeouts(
        connect=min(t.connect or MAX_CONNECT_TIMEOUT_S, MAX_CONNECT_TIMEOUT_S),
        read=min(t.read or MAX_READ_TIMEOUT_S, MAX_READ_TIMEOUT_S),
        write=min(t.write or MAX_WRITE_TIMEOUT_S, MAX_WRITE_TIMEOUT_S),
    )


def redact(text: str, secrets: list[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, MASK)
    return text


def request_log(spec: RequestSpec, secrets: list[str], auth_header: str | None) -> str:
    """The request as process data: no userinfo, masked auth header and key."""
    lines = [f"{spec.method.upper()} {safe_url(spec.url)} HTTP/1.1"]
    for key, value in spec.headers.items():
        shown_value = MASK if auth_header and key.lower() == auth_header.lower() else value
        lines.append(f"{key}: {shown_value}")
    text = "\r\n".join(lines) + "\r\n\r\n"
    if spec.content:
        text += spec.content if isinstance(spec.content, str) else f"<{len(spec.content)} bytes>"
    elif spec.json is not None:
        text += json.dumps(spec.json, ensure_ascii=False)
    elif spec.data:
        text += "&".join(f"{k}={v}" for k, v in spec.data.items())
    for key, (filename, content, _) in spec.files or ():
        if filename:
            text += f"\r\n{key}=@{filename} <{len(content)} bytes>"
    return redact(text, secrets)


def response_file(reply: HttpReply, directory: Path) -> File:
    """A binary response as Dify's file object (`tool_file`). The type comes from
    the Content-Disposition filename, else Content-Type, else the URL (Dify's
    order); the name from Content-Disposition, else the URL's last segment when
    it has an extension, else a fresh id."""
    disposition = reply.filename
    url_name = PurePosixPath(urlsplit(reply.url).path).name
    mime = (
        (mimetypes.guess_type(disposition)[0] if disposition else None)
        or reply.content_type.split(";", 1)[0].strip()
        or mimetypes.guess_type(url_name)[0]
        or "application/octet-stream"
    )
    name = disposition or (url_name if PurePosixPath(url_name).suffix else None)
    return from_bytes(reply.content, mime_type=mime, directory=directory, filename=name)


def _outputs(reply: HttpReply, ctx: NodeContext) -> dict[str, Any]:
    files = []
    if reply.is_file and ctx.connectors is not None:
        files.append(response_file(reply, ctx.connectors.files_dir()))
    return {
        "status_code": reply.status_code,
        "body": "" if files else reply.text,
        "headers": reply.headers,
        "files": files,
    }


def run(data: Data, ctx: NodeContext) -> NodeResult:
    if ctx.connectors is None:
        raise NodeRunError("errors.connector.missing")
    limit = ctx.connectors.http.limits.max_binary_bytes
    spec, secrets = build_request(data, ctx.variables, lambda f: read_file(f, ctx, limit))
    auth_header = None
    if data.authorization.type == "api-key" and data.authorization.config is not None:
        auth_header = data.authorization.config.header or "Authorization"
    process_data = {"request": request_log(spec, secrets, auth_header)}
    verify = data.ssl_verify if data.ssl_verify is not None else True
    try:
        reply = ctx.connectors.http.request(
            spec, timeouts=timeouts(data), verify=verify, cancel=ctx.cancel
        )
    except ConnectorError as exc:
        # The message never carries a secret, but the URL a workflow built might.
        exc.params = {k: redact(str(v), secrets) for k, v in exc.params.items()}
        exc.args = (exc.render(),)
        raise
    if not reply.is_success and (data.error_strategy or data.retry_config.retry_enabled):
        raise HTTPResponseCodeError(reply.status_code)
    return NodeResult(outputs=_outputs(reply, ctx), process_data=process_data)


# RFC 9110's idempotent methods: sending one twice has the effect of sending it once.
_IDEMPOTENT = frozenset({"get", "head", "options", "put", "delete"})


def repeatable(data: Data) -> bool:
    """A POST or PATCH request is not sent twice by a resumed run."""
    return data.method.lower() in _IDEMPOTENT


SPEC = NodeSpec(
    type="http-request",
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=True,
    repeatable=repeatable,
)
