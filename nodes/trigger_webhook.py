"""`trigger-webhook`: a workflow that starts when its webhook URL is called
(Dify's webhook trigger). `serve` reads the HTTP request into Dify's raw
webhook data (`method`, `headers`, `query_params`, `body`, `files`) and
hands it over as the run's `webhook_data` input; `accepts` checks it as
Dify's `WebhookService` does before anything runs (the method, the content
type, required headers, parameters and body fields, their declared types;
form and query values converted from text), so a bad call is a 400 before
a run is queued. The node then passes on what its configuration names:
each header (its `-` as `_`), each query parameter, each body field (the
whole text for `text/plain`), `_webhook_raw`, the whole request, and the
run's `sys.*` values as `sys.<name>` (as Dify's node does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from firstgate.common.dsl import DslModel, shown
from firstgate.nodes.base import NodeContext, NodeResult, Role, system_outputs
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.start import InputError
from pydantic import Field, field_validator

ContentType = Literal[
    "application/json",
    "multipart/form-data",
    "application/x-www-form-urlencoded",
    "text/plain",
    "application/octet-stream",
]
ValueType = Literal[
    "string",
    "number",
    "boolean",
    "object",
    "array[string]",
    "array[number]",
    "array[boolean]",
    "array[object]",
    "file",
]
RAW_OUTPUT = "_webhook_raw"
# Dify's `MAX_WEBHOOK_NODES_PER_WORKFLOW`: a sixth webhook trigger does not publish.
MAX_PER_WORKFLOW = 5
WHOLE_BODY_TYPES = ("text/plain", "application/octet-stream")
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
_BOOLEANS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


class Parameter(DslModel):
    name: str = Field(min_length=1)
    type: ValueType = "string"
    required: bool = False


class Data(BaseNodeData):
    method: Literal["get", "post", "head", "patch", "put", "delete"] = "get"
    content_type: ContentType = "application/json"
    headers: list[Parameter] = Field(default_factory=list)
    params: list[Parameter] = Field(default_factory=list)  # the query
    body: list[Parameter] = Field(default_factory=list)
    status_code: int = Field(default=200, ge=100, le=599)
    response_body: str = ""
    # Where Dify served it (`.../triggers/webhook/<id>`): serve keeps that id,
    # so callers configured for Dify keep working (see `serve/webhooks.py`).
    webhook_url: str = ""

    @field_validator("method", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class WebhookRequestError(InputError):
    """The request does not fit the webhook's configuration (Dify's 400)."""


def sanitized(name: str) -> str:
    """A header's name as a variable: `-` becomes `_` (Dify)."""
    return name.replace("-", "_")


def output_names(data: Data) -> set[str]:
    names = {sanitized(h.name) for h in data.headers}
    names |= {p.name for p in data.params} | {b.name for b in data.body}
    return names | {RAW_OUTPUT}


def content_type_of(headers: Mapping[str, Any]) -> str:
    """The request's media type without parameters; JSON when it names none (Dify)."""
    for name, value in headers.items():
        if name.lower() == "content-type" and str(value).strip():
            return str(value).split(";", 1)[0].strip().lower()
    return "application/json"


def accepts(
    data: Data, inputs: Mapping[str, Any], upload_config: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The run's inputs from the raw webhook data, checked and typed (Dify's order)."""
    raw = inputs.get("webhook_data")
    if set(inputs) - {"webhook_data"} or not isinstance(raw, Mapping):
        raise WebhookRequestError("dsl.webhook.notRequest")
    headers = _mapping(raw.get("headers"))
    query = _mapping(raw.get("query_params"))
    body = raw.get("body")
    method = str(raw.get("method") or "").upper()
    if method != data.method.upper():
        raise WebhookRequestError(
            "dsl.webhook.method", expected=data.method.upper(), got=shown(method)
        )
    got_type = content_type_of(headers)
    if got_type != data.content_type:
        raise WebhookRequestError(
            "dsl.webhook.contentType", expected=data.content_type, got=shown(got_type)
        )
    _require_headers(headers, data.headers)
    processed = {
        "method": method,
        "headers": dict(headers),
        "query_params": _parameters(query, data.params, form=True, where="params"),
        "body": _body(body, data, _mapping(raw.get("files"))),
        "files": _mapping(raw.get("files")),
    }
    return {
        "webhook_data": processed,
        "webhook_headers": processed["headers"],
        "webhook_query_params": processed["query_params"],
        "webhook_body": processed["body"],
    }


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _require_headers(headers: Mapping[str, Any], configured: list[Parameter]) -> None:
    present = {sanitized(k).lower() for k in headers}
    for header in configured:
        if header.required and sanitized(header.name).lower() not in present:
            raise WebhookRequestError("dsl.webhook.missing", where="headers", name=header.name)


def _parameters(
    values: Mapping[str, Any],
    configured: list[Parameter],
    *,
    form: bool,
    where: str,
    files: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    # Configured ones typed; the others passed on as they came (Dify).
    processed = dict(values)
    for parameter in configured:
        if form and parameter.type == "file":
            # A file field is no text value: it is among the request's files.
            if parameter.required and parameter.name not in (files or {}):
                raise WebhookRequestError("dsl.webhook.missing", where=where, name=parameter.name)
            continue
        if parameter.name not in values:
            if parameter.required:
                raise WebhookRequestError("dsl.webhook.missing", where=where, name=parameter.name)
            continue
        value = values[parameter.name]
        processed[parameter.name] = (
            _from_text(parameter, value) if form else _checked(parameter, value)
        )
    return processed


def _body(body: Any, data: Data, files: Mapping[str, Any]) -> Any:
    if data.content_type in WHOLE_BODY_TYPES:
        whole = body.get("raw") if isinstance(body, Mapping) else None
        if any(b.required for b in data.body) and not whole:
            raise WebhookRequestError("dsl.webhook.missing", where="body", name="raw")
        return dict(body) if isinstance(body, Mapping) else {"raw": whole}
    if not isinstance(body, Mapping):
        # A JSON body that is not an object has no fields to name.
        if any(b.required for b in data.body):
            missing = next(b.name for b in data.body if b.required)
            raise WebhookRequestError("dsl.webhook.missing", where="body", name=missing)
        return body
    form = data.content_type in FORM_TYPES
    return _parameters(body, data.body, form=form, where="body", files=files)


def _bad(parameter: Parameter, value: Any) -> WebhookRequestError:
    return WebhookRequestError(
        "dsl.webhook.badValue", name=parameter.name, expected=parameter.type, got=shown(value)
    )


def _from_text(parameter: Parameter, value: Any) -> Any:
    """A query or form value (text) as its declared type: string, number, boolean."""
    text = str(value)
    if parameter.type == "string":
        return text
    if parameter.type == "number":
        try:
            number = float(text)
        except ValueError:
            raise _bad(parameter, value) from None
        if number != number or number in (float("inf"), float("-inf")):
            raise _bad(parameter, value)
        return int(number) if number.is_integer() else number
    if parameter.type == "boolean":
        if text.lower() not in _BOOLEANS:
            raise _bad(parameter, value)
        return _BOOLEANS[text.lower()]
    raise _bad(parameter, value)  # an object or array cannot be one form field


def _is(kind: str, value: Any) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "object":
        return isinstance(value, dict)
    return True


def _checked(parameter: Parameter, value: Any) -> Any:
    """A JSON value checked against its declared type (arrays: every item)."""
    kind = parameter.type
    if kind == "file":
        return value
    if kind.startswith("array["):
        item = kind[len("array[") : -1]
        if not isinstance(value, list) or not all(_is(item, v) for v in value):
            raise _bad(parameter, value)
        return value
    if not _is(kind, value):
        raise _bad(parameter, value)
    return value


def _lookup(values: Mapping[str, Any], name: str) -> Any:
    """A header by name, `-` and `_` alike, case ignored (Dify)."""
    if name in values:
        return values[name]
    wanted = sanitized(name).lower()
    for key, value in values.items():
        if sanitized(key).lower() == wanted:
            return value
    return None


def run(data: Data, ctx: NodeContext) -> NodeResult:
    request = _mapping(ctx.inputs.get("webhook_data"))
    headers = _mapping(request.get("headers"))
    query = _mapping(request.get("query_params"))
    body = request.get("body")
    fields = body if isinstance(body, Mapping) else {}
    files = _mapping(request.get("files"))
    outputs: dict[str, Any] = {}
    for header in data.headers:
        outputs[sanitized(header.name)] = _lookup(headers, header.name)
    for parameter in data.params:
        outputs[parameter.name] = query.get(parameter.name)
    for field in data.body:
        if data.content_type == "text/plain":
            outputs[field.name] = str(fields.get("raw") or "")
        elif data.content_type == "application/octet-stream":
            outputs[field.name] = fields.get("raw")
        elif field.type == "file":
            outputs[field.name] = files.get(field.name)
        else:
            outputs[field.name] = fields.get(field.name)
    outputs[RAW_OUTPUT] = request
    outputs.update(system_outputs(ctx))
    return NodeResult(outputs=outputs, inputs=dict(ctx.inputs))


SPEC = NodeSpec(
    type="trigger-webhook",
    role=Role.ROOT,
    data_model=Data,
    run=run,
    output_names=output_names,
    supports_retry=False,
    inline=True,
    accepts=accepts,
    trigger=True,
    most_per_workflow=MAX_PER_WORKFLOW,
)
