"""OpenAI-compatible chat completions (llama.cpp `llama-server`, vLLM, Ollama)."""

from __future__ import annotations

import json
from typing import Any

from ..errors import InvokeError, invoke_error_for_status, redact
from .frames import DONE, Frame, FrameError, Usage
from .request import PreparedRequest

_DONE_MARK = b"[DONE]"


def build_request(
    *,
    base_url: str,
    api_key: str | None,
    model: str,
    messages: list[dict[str, Any]],
    parameters: dict[str, Any],
    stop: list[str] | None,
) -> PreparedRequest:
    body: dict[str, Any] = {**parameters, "model": model, "messages": messages, "stream": True}
    body.setdefault("stream_options", {"include_usage": True})
    if stop:
        body["stop"] = stop
    headers = {"Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return PreparedRequest(
        url=f"{base_url.rstrip('/')}/chat/completions", headers=headers, body=body
    )


def decode(payload: bytes) -> Frame:
    if payload == _DONE_MARK:
        return DONE
    try:
        doc = json.loads(payload)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise FrameError("not JSON", payload) from exc
    if not isinstance(doc, dict):
        raise FrameError("not a JSON object", payload)
    if "error" in doc and doc["error"]:
        raise error_from_body(_status_of(doc["error"]), doc, secrets=())
    choices = doc.get("choices")
    usage = Usage.from_mapping(doc.get("usage"))
    if not choices:
        if choices is None and usage is None and "timings" not in doc:
            raise FrameError("no choices", payload)
        return Frame(usage=usage)
    if not isinstance(choices, list):
        raise FrameError("choices is not a list", payload)
    choice = choices[0]
    if not isinstance(choice, dict):
        raise FrameError("choice is not an object", payload)
    delta = choice.get("delta") or {}
    if not isinstance(delta, dict):
        raise FrameError("delta is not an object", payload)
    text = delta.get("content") or ""
    reasoning = delta.get("reasoning_content") or ""
    if not isinstance(text, str) or not isinstance(reasoning, str):
        raise FrameError("content is not a string", payload)
    return Frame(
        text=text, reasoning=reasoning, finish_reason=choice.get("finish_reason"), usage=usage
    )


def _status_of(error: object) -> int:
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) and 400 <= code < 600 else 500


def error_from_body(
    status: int,
    body: object,
    *,
    secrets: tuple[str, ...] | list[str],
    retry_after_s: float | None = None,
) -> InvokeError:
    """An HTTP error status (or an error frame) with its JSON body, as a typed error."""
    detail = ""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            detail = str(err.get("message") or err.get("type") or "")
        elif isinstance(err, str):
            detail = err
        elif isinstance(body.get("message"), str):
            detail = body["message"]
    elif isinstance(body, bytes | str):
        detail = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    detail = redact(detail.strip()[:500] or f"HTTP {status}", secrets)
    cls = invoke_error_for_status(status)
    return cls(status=status, retry_after_s=retry_after_s, detail=detail)
