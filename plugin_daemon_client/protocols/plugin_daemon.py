"""The Dify plugin daemon's LLM dispatch endpoint.

Request: `POST {base}/plugin/{tenant_id}/dispatch/llm/invoke` with
`X-Api-Key` and `X-Plugin-ID`. Response: lines `data: {"code", "message",
"data"}` whose `data` is an LLM result chunk. A non-zero `code` is an error;
its `message` is itself JSON (`{"error_type", "message"}`), and for
`PluginInvokeError` that inner message is JSON once more, naming the
provider's invoke error. The daemon may withhold headers until the first
chunk and sends no heartbeat.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import DAEMON_INVOKE_ERRORS, InvokeError, InvokeServerError, redact
from .frames import Frame, FrameError, Usage
from .openai_compatible import error_from_body as _status_error
from .request import PreparedRequest


def build_request(
    *,
    base_url: str,
    api_key: str | None,
    tenant_id: str,
    plugin_id: str | None,
    user_id: str,
    provider: str,
    model: str,
    credentials: dict[str, Any],
    messages: list[dict[str, Any]],
    parameters: dict[str, Any],
    stop: list[str] | None,
) -> PreparedRequest:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["X-Api-Key"] = api_key
    if plugin_id:
        headers["X-Plugin-ID"] = plugin_id
    body = {
        "user_id": user_id,
        "data": {
            "provider": provider,
            "model_type": "llm",
            "model": model,
            "credentials": credentials,
            "prompt_messages": messages,
            "model_parameters": parameters,
            "stop": stop or [],
            "tools": [],
            "stream": True,
        },
    }
    url = f"{base_url.rstrip('/')}/plugin/{tenant_id}/dispatch/llm/invoke"
    return PreparedRequest(url=url, headers=headers, body=body)


def _text_of(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal content parts: keep the text ones
        return "".join(
            str(part.get("data") or "")
            for part in content
            if isinstance(part, dict) and part.get("type", "text") == "text"
        )
    raise TypeError("content is neither text nor a list of parts")


def decode(payload: bytes, secrets: tuple[str, ...] = ()) -> Frame:
    try:
        envelope = json.loads(payload)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise FrameError("not JSON", payload) from exc
    if not isinstance(envelope, dict) or "code" not in envelope:
        raise FrameError("not a plugin daemon envelope", payload)
    if envelope["code"] != 0:
        raise daemon_error(envelope.get("message"), secrets)
    chunk = envelope.get("data")
    if not isinstance(chunk, dict):
        raise FrameError("envelope without a chunk", payload)
    delta = chunk.get("delta")
    if not isinstance(delta, dict):
        raise FrameError("chunk without a delta", payload)
    message = delta.get("message") or {}
    try:
        text = _text_of(message.get("content") if isinstance(message, dict) else None)
    except TypeError as exc:
        raise FrameError(str(exc), payload) from exc
    return Frame(
        text=text,
        finish_reason=delta.get("finish_reason"),
        usage=Usage.from_mapping(delta.get("usage")),
    )


def daemon_error(message: object, secrets: tuple[str, ...] = ()) -> InvokeError:
    """Unwrap `PluginDaemonError` / `PluginInvokeError` JSON into a typed error."""
    error_type, detail = None, message if isinstance(message, str) else json.dumps(message)
    for _ in range(2):  # daemon error -> plugin invoke error -> provider's invoke error
        try:
            inner = json.loads(detail)
        except (TypeError, ValueError, RecursionError):
            break
        if not isinstance(inner, dict) or "error_type" not in inner:
            break
        error_type = str(inner["error_type"])
        detail = inner.get("message") if isinstance(inner.get("message"), str) else str(inner)
        if error_type != "PluginInvokeError":
            break
    cls = DAEMON_INVOKE_ERRORS.get(error_type or "", InvokeServerError)
    return cls(detail=redact(str(detail)[:500], secrets), daemon_error_type=error_type or "")


def error_from_status(
    status: int, body: bytes, *, secrets: tuple[str, ...], retry_after_s: float | None
) -> InvokeError:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and "code" in doc and isinstance(doc.get("message"), str):
        err = daemon_error(doc["message"], secrets)
        if type(err) is not InvokeServerError:
            err.status, err.retry_after_s = status, retry_after_s
            return err
    return _status_error(
        status, doc if doc is not None else body, secrets=secrets, retry_after_s=retry_after_s
    )
