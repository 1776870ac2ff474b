"""Google Gemini's `streamGenerateContent` (`kind: gemini`).

Request: `POST {base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse`
(`base_url` `https://generativelanguage.googleapis.com`), the key in
`x-goog-api-key`; the system prompt is `systemInstruction`, messages are
`contents` (roles `user` and `model`; a tool's answer is a `functionResponse`
part), images are `inlineData`, tools are `functionDeclarations`, model
parameters and a JSON schema for the answer (`responseMimeType`,
`responseSchema`) go in `generationConfig`.

Gemini takes a subset of JSON Schema (OpenAPI 3.0's): `gemini_schema`
translates what it can and names what it cannot. The settings-aware loader
asks `schema_problem`, so a route that cannot express a node's schema is a
problem when the workflow loads, naming the route and the node.

Stream: SSE, each `data:` line a `GenerateContentResponse`. Text parts are
content, `thought` parts reasoning, `functionCall` parts whole tool calls;
a chunk without any (metadata, an empty part) is not. A candidate's
`finishReason` ends the stream (`usageMetadata` with it);
`promptFeedback.blockReason` or a safety finish (`SAFETY`, `RECITATION`, ...)
is a non-transient `ContentBlockedError`; an `error` object is the typed error
its code names.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from firstgate.common.redaction import ServerText

from ..errors import (
    AuthorizationError,
    BadRequestError,
    ContentBlockedError,
    InvokeError,
    InvokeServerError,
    RateLimitError,
    invoke_error_for_status,
)
from . import messages as m
from .base import ChatCall, Item, StreamDecoder, WireProtocol
from .frames import DONE, Frame, ToolCallDelta, Usage
from .openai_compatible import error_from_body
from .request import PreparedRequest
from .sse_stream import EventStream, json_object

# generationConfig fields, by their Dify/OpenAI parameter name.
_GENERATION = {
    "max_tokens": "maxOutputTokens",
    "temperature": "temperature",
    "top_p": "topP",
    "top_k": "topK",
    "seed": "seed",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
    "thinking_config": "thinkingConfig",
}
_TOOL_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}
_FINISHED = {"STOP": "stop", "MAX_TOKENS": "length"}
# Finish reasons that mean the answer was blocked (not worth another attempt).
_BLOCKED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "LANGUAGE",
    }
)
# google.rpc status names -> ours (an `error` object mid-stream or in a body).
_STATUSES: dict[str, type[InvokeError]] = {
    "RESOURCE_EXHAUSTED": RateLimitError,
    "PERMISSION_DENIED": AuthorizationError,
    "UNAUTHENTICATED": AuthorizationError,
    "INVALID_ARGUMENT": BadRequestError,
    "FAILED_PRECONDITION": BadRequestError,
    "NOT_FOUND": BadRequestError,
}

# The keywords of JSON Schema that Gemini's schema takes as they are.
_KEPT = frozenset(
    {
        "description",
        "format",
        "nullable",
        "maxItems",
        "minItems",
        "required",
        "propertyOrdering",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "title",
        "minProperties",
        "maxProperties",
        "example",
        "default",
    }
)
# Annotations that change nothing Gemini checks (the answer is validated against
# the whole schema afterwards): dropped.
_DROPPED = frozenset({"$schema", "$id", "$comment", "examples", "readOnly", "writeOnly"})
_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object"})


class SchemaNotExpressible(ValueError):
    """A JSON schema Gemini's schema subset cannot say; `str()` names where and why."""


class Gemini(WireProtocol):
    """Gemini's streamGenerateContent (see the module docstring)."""

    kind = "gemini"
    # generativelanguage.googleapis.com answers no liveness probe.
    default_probe = "off"

    @classmethod
    def schema_problem(cls, schema: dict[str, Any]) -> str | None:
        try:
            gemini_schema(schema)
        except SchemaNotExpressible as exc:
            return str(exc)
        return None

    def request(self, call: ChatCall) -> PreparedRequest:
        body: dict[str, Any] = {"contents": _contents(call.messages)}
        system = m.system_text(call.messages)
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        config = {v: call.parameters[k] for k, v in _GENERATION.items() if k in call.parameters}
        if call.stop:
            config["stopSequences"] = list(call.stop)
        if call.json_schema is not None:
            config["responseMimeType"] = "application/json"
            config["responseSchema"] = _expressed(call.json_schema)
        if config:
            body["generationConfig"] = config
        if call.tools:
            declarations = [
                {
                    "name": t.name,
                    "description": t.description,
                    "parameters": _expressed(t.parameters),
                }
                for t in call.tools
            ]
            body["tools"] = [{"functionDeclarations": declarations}]
            if call.tool_choice in _TOOL_MODES:
                mode = _TOOL_MODES[call.tool_choice]
                body["toolConfig"] = {"functionCallingConfig": {"mode": mode}}
        headers = {"Accept": "text/event-stream"}
        if self.endpoint.api_key:
            headers["x-goog-api-key"] = self.endpoint.api_key
        model = quote(call.model.removeprefix("models/"), safe="-._~")
        url = f"{self.endpoint.base_url.rstrip('/')}/v1beta/models/{model}:streamGenerateContent?alt=sse"
        return PreparedRequest(url=url, headers=headers, body=body)

    def status_error(self, status: int, body: bytes, *, retry_after_s: float | None) -> InvokeError:
        doc = json_object(body)
        error = error_from_body(
            status, doc if doc is not None else body, retry_after_s=retry_after_s
        )
        if doc is not None and "API_KEY_INVALID" in json.dumps(doc.get("error")):
            # Gemini answers a bad key with 400 INVALID_ARGUMENT.
            return AuthorizationError(status=status, detail=error.params.get("detail", ""))
        return error

    def decoder(self, max_line_bytes: int, *, stream: bool = True) -> StreamDecoder:
        return GeminiStream(max_line_bytes)


def _expressed(schema: dict[str, Any]) -> dict[str, Any]:
    try:
        return gemini_schema(schema)
    except SchemaNotExpressible as exc:
        raise BadRequestError(detail=f"Gemini cannot express this JSON schema: {exc}") from None


def gemini_schema(schema: object, path: str = "$") -> dict[str, Any]:
    """`schema` in Gemini's schema subset; `SchemaNotExpressible` names the first
    keyword it cannot say (`$ref`, `oneOf`, a tuple of items, a type union...)."""
    if not isinstance(schema, dict):
        raise SchemaNotExpressible(f"{path} is not a schema object")
    out: dict[str, Any] = {}
    for key, value in schema.items():
        at = f"{path}.{key}"
        if key == "type":
            out.update(_type(value, at))
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: gemini_schema(sub, f"{at}.{name}") for name, sub in value.items()}
        elif key == "items" and isinstance(value, dict):
            out[key] = gemini_schema(value, at)
        elif key == "anyOf" and isinstance(value, list):
            out[key] = [gemini_schema(sub, f"{at}[{i}]") for i, sub in enumerate(value)]
        elif key == "enum" and isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[key] = value
        elif key == "const" and isinstance(value, str):
            out["enum"] = [value]
        elif key == "additionalProperties" and isinstance(value, bool):
            continue
        elif key in _KEPT or key in _DROPPED:
            if key in _KEPT:
                out[key] = value
        else:
            raise SchemaNotExpressible(f"{at} is not in Gemini's schema subset")
    return out


def _type(value: object, at: str) -> dict[str, Any]:
    names = value if isinstance(value, list) else [value]
    real = [n for n in names if n != "null"]
    if len(real) != 1 or real[0] not in _TYPES:
        raise SchemaNotExpressible(f"{at} {json.dumps(value)} is not one Gemini type")
    return {"type": real[0], "nullable": True} if len(real) < len(names) else {"type": real[0]}


def _parts(content: object) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in m.parts(content):
        if isinstance(part, str):
            out.append({"text": part})
        elif part.inline:
            out.append({"inlineData": {"mimeType": part.media_type, "data": part.data}})
        else:
            raise BadRequestError(detail="Gemini takes images only as their bytes, not by URL")
    return out


def _contents(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turns of `user` and `model`; a tool's answer is a `functionResponse` part
    named after the call it answers."""
    names: dict[str, str] = {}
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            continue
        if role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            answer = {"content": m.text(message.get("content"))}
            parts = [
                {"functionResponse": {"name": names.get(call_id, call_id), "response": answer}}
            ]
            role = "user"
        elif role == "assistant":
            parts = _parts(message.get("content"))
            for call_id, name, arguments in m.tool_calls(message):
                names[call_id] = name
                parts.append({"functionCall": {"name": name, "args": arguments}})
            role = "model"
        else:
            parts, role = _parts(message.get("content")), "user"
        if not parts:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["parts"].extend(parts)
        else:
            turns.append({"role": role, "parts": parts})
    return turns


class GeminiStream(EventStream):
    """One streamGenerateContent stream (see the module docstring)."""

    def __init__(self, max_line_bytes: int) -> None:
        super().__init__(max_line_bytes)
        self._calls = 0

    def event(self, doc: dict[str, Any]) -> Item | list[Item] | None:
        candidates = doc.get("candidates")
        if type(candidates) is list and candidates and "promptFeedback" not in doc:
            candidate = candidates[0]
            if type(candidate) is dict and "finishReason" not in candidate and "error" not in doc:
                # The hot path: a chunk of one plain text part.
                text = _one_text(candidate.get("content"))
                if text is not None:
                    return text
        return self._event(doc, candidates)

    def _event(self, doc: dict[str, Any], candidates: object) -> Item | list[Item] | None:
        if "error" in doc and doc["error"]:
            raise _error(doc["error"])
        feedback = doc.get("promptFeedback")
        blocked = feedback.get("blockReason") if isinstance(feedback, dict) else None
        if blocked:
            raise ContentBlockedError(reason=ServerText(f"prompt: {blocked}"))
        candidate = candidates[0] if isinstance(candidates, list) and candidates else None
        if not isinstance(candidate, dict):
            return None
        reason = candidate.get("finishReason")
        items = self._content(candidate.get("content"))
        if isinstance(reason, str) and reason:
            items.extend(self._end(reason, doc.get("usageMetadata")))
        if not items:
            return None
        return items[0] if len(items) == 1 else items

    def _content(self, content: object) -> list[Item]:
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list):
            return []
        items: list[Item] = []
        for part in parts:
            if not isinstance(part, dict):
                continue
            piece, call = part.get("text"), part.get("functionCall")
            if isinstance(piece, str) and piece:
                items.append(Frame(reasoning=piece) if part.get("thought") is True else piece)
            elif isinstance(call, dict) and isinstance(call.get("name"), str):
                self._calls += 1
                call_id = str(call.get("id") or f"call_{self._calls}")
                arguments = json.dumps(call.get("args") or {}, ensure_ascii=False)
                items.append(
                    Frame(tool_calls=(ToolCallDelta(None, call_id, call["name"], arguments),))
                )
        return items

    def _end(self, reason: str, usage: object) -> list[Item]:
        if reason in _BLOCKED:
            raise ContentBlockedError(reason=ServerText(f"answer: {reason}"))
        finish = _FINISHED.get(reason)
        if finish is None:  # OTHER, MALFORMED_FUNCTION_CALL, ...: the model failed
            raise InvokeServerError(detail=ServerText(f"finishReason {reason}"))
        if finish == "stop" and self._calls:
            finish = "tool_calls"
        self.ended = True
        prompt, answer, thoughts, total = m.usage_numbers(
            usage,
            "promptTokenCount",
            "candidatesTokenCount",
            "thoughtsTokenCount",
            "totalTokenCount",
        )
        completion = answer + thoughts
        return [
            Frame(
                finish_reason=finish, usage=Usage(prompt, completion, total or prompt + completion)
            ),
            DONE,
        ]


def _one_text(content: object) -> str | None:
    """The text of content that is one plain, non-empty text part, else None."""
    parts = content.get("parts") if type(content) is dict else None
    if type(parts) is not list or len(parts) != 1:
        return None
    part = parts[0]
    text = part.get("text") if type(part) is dict and len(part) == 1 else None
    return text if type(text) is str and text else None


def _error(error: object) -> InvokeError:
    code = error.get("code") if isinstance(error, dict) else None
    status = error.get("status") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if isinstance(status, str) and status in _STATUSES:
        cls = _STATUSES[status]
    elif isinstance(code, int) and not isinstance(code, bool):
        cls = invoke_error_for_status(code)
    else:
        cls = InvokeServerError
    return cls(detail=ServerText(str(message or status or code or "error")))
