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

from firstgate.common.redaction import ServerText

from ..errors import DAEMON_INVOKE_ERRORS, ClientConfigError, InvokeError, InvokeServerError
from .base import ChatCall, Endpoint, StreamDecoder, WireProtocol
from .frames import Frame, FrameError, Usage
from .openai_compatible import error_from_body
from .openai_compatible import tool_calls as whole_tool_calls
from .request import PreparedRequest
from .sse_stream import SSEStream


class PluginDaemon(WireProtocol):
    """Dify's plugin daemon LLM dispatch (see the module docstring)."""

    kind = "plugin-daemon"
    # The daemon's host is not the server doing the work: a probe cannot see it.
    default_probe = "off"
    # Whether a model plugin takes a schema depends on the model: Dify asks
    # the model's schema; a route that knows says `json_schema: true`.
    default_json_schema = False

    def __init__(self, endpoint: Endpoint) -> None:
        if not endpoint.tenant_id:
            raise ClientConfigError("errors.config.daemonTenant")
        super().__init__(endpoint)

    def request(self, call: ChatCall) -> PreparedRequest:
        endpoint = self.endpoint
        headers = {"Content-Type": "application/json"}
        if endpoint.api_key:
            headers["X-Api-Key"] = endpoint.api_key
        if endpoint.plugin_id:
            headers["X-Plugin-ID"] = endpoint.plugin_id
        parameters = dict(call.parameters)
        if call.json_schema is not None:
            # How Dify hands a schema to a model plugin that supports structured output.
            parameters["response_format"] = "json_schema"
            parameters["json_schema"] = json.dumps(
                {"schema": call.json_schema, "name": "llm_response"}, ensure_ascii=False
            )
        # The daemon always streams: a non-streamed call is the same stream, collected.
        body = {
            "user_id": endpoint.user_id,
            "data": {
                "provider": call.provider or call.model,
                "model_type": "llm",
                "model": call.model,
                "credentials": call.credentials or {},
                "prompt_messages": call.messages,
                "model_parameters": parameters,
                "stop": call.stop or [],
                "tools": [
                    {"name": t.name, "description": t.description, "parameters": t.parameters}
                    for t in call.tools
                ],
                "stream": True,
            },
        }
        url = f"{endpoint.base_url.rstrip('/')}/plugin/{endpoint.tenant_id}/dispatch/llm/invoke"
        return PreparedRequest(url=url, headers=headers, body=body)

    def status_error(self, status: int, body: bytes, *, retry_after_s: float | None) -> InvokeError:
        return error_from_status(status, body, retry_after_s=retry_after_s)

    def decoder(self, max_line_bytes: int, *, stream: bool = True) -> StreamDecoder:
        return SSEStream(decode, max_line_bytes)


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


def decode(payload: bytes) -> Frame:
    try:
        # Invalid UTF-8 becomes U+FFFD (see openai_compatible.decode).
        envelope = json.loads(payload.decode("utf-8", "replace"))
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise FrameError("not JSON", payload) from exc
    if not isinstance(envelope, dict) or "code" not in envelope:
        raise FrameError("not a plugin daemon envelope", payload)
    if envelope["code"] != 0:
        raise daemon_error(envelope.get("message"))
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
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    return Frame(
        text=text,
        finish_reason=delta.get("finish_reason"),
        usage=Usage.from_mapping(delta.get("usage")),
        # Dify's model plugins hand out whole calls (no index): each is complete.
        tool_calls=whole_tool_calls(calls, payload) if calls else (),
    )


def daemon_error(message: object) -> InvokeError:
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
    return cls(detail=ServerText(str(detail)), daemon_error_type=ServerText(error_type or ""))


def error_from_status(status: int, body: bytes, *, retry_after_s: float | None) -> InvokeError:
    try:
        doc = json.loads(body.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and "code" in doc and isinstance(doc.get("message"), str):
        err = daemon_error(doc["message"])
        if type(err) is not InvokeServerError:
            err.status, err.retry_after_s = status, retry_after_s
            return err
    return error_from_body(status, doc if doc is not None else body, retry_after_s=retry_after_s)
