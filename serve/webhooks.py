"""Dify's webhook trigger endpoint: `/triggers/webhook/<webhook id>`, any
method, no API key (the id is the secret, as in Dify).

Each served workflow app's `trigger-webhook` node has one id: the one in the
export's `webhook_url` when Dify wrote one (callers configured for Dify keep
working), else 24 URL-safe characters derived from the app's key and the
node (stable across restarts and processes, unguessable without the key).

A call is read as Dify's `WebhookService` reads it: a body past the limit
(`WEBHOOK_REQUEST_BODY_MAX_SIZE`, 10 MiB by default) is a 413 before it is
read, also when it comes chunked without a length; the raw webhook data
(method, headers, query, body by content type) goes to the node's
`accepts` (the method, the content type, required and typed fields: a 400
with Dify's `{"error": "Bad Request", "message"}`), then the run starts as
an API run starts (`Runs.start`: in this process, or queued for a worker
with `--broker`) and the reply is the node's configured status and body at
once, without waiting for the run (Dify's webhooks are asynchronous).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from firstgate.common.nesting import MAX_DEPTH, deeper_than
from firstgate.locales import t
from firstgate.locales.localized_error import LocalizedError
from firstgate.nodes import trigger_webhook
from firstgate.runtime.dsl.graph import NodeDef
from firstgate.serve.apps import App, AppDirectory
from firstgate.serve.errors import ApiError, dump_json
from firstgate.serve.launch import RunRequest
from firstgate.serve.runs import Runs
from firstgate.store.base import TRIGGERED_WEBHOOK
from werkzeug.datastructures import Headers
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Request, Response

PATH_PREFIX = "/triggers/webhook/"
# Dify's WEBHOOK_REQUEST_BODY_MAX_SIZE, and its default.
MAX_BODY_VARIABLE = "WEBHOOK_REQUEST_BODY_MAX_SIZE"
DEFAULT_MAX_BODY = 10 * 1024 * 1024
WEBHOOK_USER = "trigger-webhook"  # the run's user: nobody signed in
_ID_CHARS = 24
_DIFY_URL = re.compile(r"/triggers/webhook/([A-Za-z0-9_-]{8,64})/?$")
_DEFAULT_REPLY = {"status": "success", "message": "Webhook processed successfully"}


@dataclass(frozen=True, slots=True)
class Webhook:
    app: App
    node: NodeDef
    id: str

    @property
    def data(self) -> trigger_webhook.Data:
        return self.node.data  # type: ignore[return-value]

    @property
    def path(self) -> str:
        return PATH_PREFIX + self.id


def webhook_id(app: App, node: NodeDef) -> str:
    data: trigger_webhook.Data = node.data  # type: ignore[assignment]
    found = _DIFY_URL.search(data.webhook_url.strip())
    if found:
        return found.group(1)
    digest = hmac.new(
        app.key.encode(), f"webhook\x1f{app.workflow.app_id}\x1f{node.id}".encode(), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(digest).decode()[:_ID_CHARS]


def webhooks(apps: AppDirectory) -> dict[str, Webhook]:
    """Every served webhook by its id (an id two nodes share serves the first)."""
    found: dict[str, Webhook] = {}
    for app in apps.apps.values():
        for node in app.workflow.roots:
            if isinstance(node.data, trigger_webhook.Data):
                hook = Webhook(app, node, webhook_id(app, node))
                found.setdefault(hook.id, hook)
    return found


def _reply(data: Any, status: int) -> Response:
    return Response(dump_json(data), status=status, mimetype="application/json")


def _refusal(status: int, error: str, message: str) -> Response:
    return _reply({"error": error, "message": message}, status)


def configured_reply(data: trigger_webhook.Data) -> Response:
    """The node's status and body: JSON when it reads as a JSON object or array,
    else `{"message": body}`; Dify's default when the body is empty."""
    text = data.response_body
    body: Any = _DEFAULT_REPLY
    if text:
        body = {"message": text}
        if text.strip().startswith(("{", "[")):
            try:
                body = json.loads(text)
            except ValueError:
                pass
    return _reply(body, data.status_code)


class WebhookBodyError(LocalizedError):
    """A body that cannot be read as its content type says."""


def _read_body(request: Request, limit: int) -> bytes:
    # A Content-Length past the limit is refused by werkzeug before anything is read
    # (`max_content_length`, set by `handle`); a chunked body that keeps coming is
    # read one byte past the limit and refused, not cut.
    body = request.stream.read(limit + 1)
    if len(body) > limit:
        raise RequestEntityTooLarge()
    return body


def _json_body(raw: bytes) -> Any:
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise WebhookBodyError("dsl.webhook.badJson") from None
    if deeper_than(value):
        raise WebhookBodyError("dsl.input.tooDeep", name="body", limit=MAX_DEPTH)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are not JSON


@dataclass(frozen=True, slots=True)
class Carried:
    """A file the request carried, kept once the request is accepted."""

    name: str  # the form field, or "" for a whole binary body
    filename: str
    data: bytes


# Where a carried file goes until it is kept (the checks need only that it is there).
_PENDING = {"transfer_method": "local_file", "upload_file_id": ""}


def _form(raw: bytes, headers: Headers, limit: int) -> tuple[dict[str, Any], list[Carried]]:
    """A form body's fields and its files."""
    environ = {
        "REQUEST_METHOD": "POST",
        "CONTENT_TYPE": headers.get("Content-Type", ""),
        "CONTENT_LENGTH": str(len(raw)),
        "wsgi.input": io.BytesIO(raw),
    }
    parsed = Request(environ)
    parsed.max_content_length = limit
    fields = {name: parsed.form.get(name) for name in parsed.form}
    carried = [
        Carried(name, upload.filename or name, upload.read())
        for name, upload in parsed.files.items()
        if upload.filename
    ]
    return fields, carried


def raw_data(request: Request, limit: int) -> tuple[dict[str, Any], list[Carried]]:
    """Dify's raw webhook data of this request (`WebhookService.extract_webhook_data`),
    with a placeholder where each file it carried goes, and those files."""
    raw = _read_body(request, limit)
    kind = trigger_webhook.content_type_of(request.headers)
    body: Any
    carried: list[Carried] = []
    if kind == "application/json":
        body = _json_body(raw)
    elif kind in trigger_webhook.FORM_TYPES:
        body, carried = _form(raw, request.headers, limit)
    elif kind == "application/octet-stream":
        carried = [Carried("", "body.bin", raw)] if raw else []
        body = {"raw": dict(_PENDING) if raw else None}
    else:  # text/plain, and what Dify reads as text (an unknown type)
        body = {"raw": raw.decode("utf-8", errors="replace")}
    data = {
        "method": request.method,
        "headers": dict(request.headers.items()),
        "query_params": {name: request.args.get(name) for name in request.args},
        "body": body,
        "files": {c.name: dict(_PENDING) for c in carried if c.name},
    }
    return data, carried


def keep_files(data: dict[str, Any], carried: list[Carried], hook: Webhook, keep: Keeper) -> None:
    """Each carried file kept as an upload of the app, named in the data."""
    for item in carried:
        found = keep(hook.app, item.filename, item.data)
        if item.name:
            data["files"][item.name] = found
        else:
            data["body"] = {"raw": found}


Keeper = Callable[[App, str, bytes], dict[str, Any]]  # app, file name, bytes -> Dify's file object


def handle(
    request: Request,
    hook: Webhook | None,
    runs: Runs,
    keep: Keeper,
    *,
    limit: int,
    base_url: str,
    locale: str | None,
) -> Response:
    if hook is None:
        return _refusal(404, "Not Found", t("serve.webhook.unknown", locale))
    request.max_content_length = limit + 1
    try:
        data, carried = raw_data(request, limit)
        inputs = {"webhook_data": data}
        # Checked here first: a refused call is Dify's 400 in both modes, and
        # keeps none of its files.
        hook.app.workflow.prepare_inputs(inputs, None, hook.node.id)
        keep_files(data, carried, hook, keep)
    except RequestEntityTooLarge:
        message = t("serve.webhook.tooLarge", locale, limit=limit)
        return _refusal(413, "Request Entity Too Large", message)
    except LocalizedError as exc:
        return _refusal(400, "Bad Request", exc.render(locale))
    if not runs.accepting:
        return _refusal(503, "Service Unavailable", t("serve.error.draining", locale))
    run = RunRequest(
        app_stem=hook.app.stem,
        inputs=inputs,
        user=WEBHOOK_USER,
        base_url=base_url,
        root=hook.node.id,
        triggered_from=TRIGGERED_WEBHOOK,
    )
    try:
        runs.start(hook.app, run)
    except ApiError as exc:
        body = exc.body(locale)
        return _refusal(exc.status, str(body["code"]), str(body["message"]))
    return configured_reply(hook.data)


def max_body(environ: Mapping[str, str]) -> int:
    """Dify's `WEBHOOK_REQUEST_BODY_MAX_SIZE` (bytes), else 10 MiB."""
    text = environ.get(MAX_BODY_VARIABLE, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else DEFAULT_MAX_BODY
