"""OpenAI-compatible chat completions (llama.cpp `llama-server`, vLLM, Ollama)."""

from __future__ import annotations

import json
import re
from json.decoder import scanstring
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


# --- the hot path ------------------------------------------------------------
#
# A server streams thousands of frames that differ only in the delta's content
# string. `TokenDecoder` recognises such a frame by its *skeleton* (the payload
# with the content string token cut out) and decodes only that string token,
# with the JSON parser's own string scanner. A skeleton is learned from a frame
# that `decode` fully parsed, and only after a parse of the skeleton with a
# sentinel string in the content slot proves that the slot is the delta's
# content and that nothing else in the frame depends on it. Any other payload
# takes the full path: the fast path never accepts what `decode` would refuse.

_CONTENT_KEY = '"content":"'
_SENTINEL = "\\u0000firstgate\\u0000"  # a JSON string body no real token carries
_SENTINEL_VALUE = "\x00firstgate\x00"
_MAX_SKELETONS = 256
# What a JSON string body may not hold for `TokenDecoder.bulk` to take it as it is.
_UNSAFE_IN_BULK = re.compile(rb'["\\\x00-\x1f]')
# skeleton -> where the content token starts; only plain token frames are kept.
_skeletons: dict[str, int] = {}


def _split(payload: bytes) -> tuple[str, int, str] | None:
    """(skeleton, content token start, content) or None when there is no plain
    compact `"content":"..."` string token to cut out."""
    if payload[:1] != b"{":
        return None
    try:
        text = payload.decode("utf-8", "surrogatepass")  # what json.loads does for bytes
    except UnicodeDecodeError:
        return None
    at = text.find(_CONTENT_KEY)
    if at < 0:
        return None
    start = at + len(_CONTENT_KEY) - 1  # the opening quote
    try:
        content, end = scanstring(text, start + 1, True)
    except ValueError:
        return None
    return text[:start] + text[end:], start, content


class TokenDecoder:
    """The text of a plain content-token frame of a learned shape, else None (use
    `decode`). Per stream, it remembers the shape of its last token frame: a frame
    of that shape costs one UTF-8 decode, two comparisons and the string scan of
    its content, without building a skeleton."""

    __slots__ = ("_prefix", "_start", "_suffix", "_tail", "_head", "_end", "_sep", "_overhead")

    def __init__(self) -> None:
        self._prefix: str | None = None
        self._start = 0
        self._suffix = ""
        self._tail = 0
        # The learned shape as bytes, for `bulk`: before, after and between contents.
        self._head: bytes | None = None
        self._end = b""
        self._sep = b""
        self._overhead = 0

    def bulk(self, body: bytes, max_line: int) -> tuple[int, str] | None:
        """(count, joined text) when an SSE `body` (complete lines) is nothing but
        plain token frames of the learned shape in the usual layout (one blank
        line after each), else None (use the frame path).

        At C speed: the body must be, byte for byte, `data: PREFIX"c1"SUFFIX`,
        a blank line, `data: PREFIX"c2"SUFFIX` ..., and no content may hold a
        quote, a backslash or a control character. Then every content is a
        complete JSON string needing no unescaping, and every line is a frame
        `decode` would accept as a plain token.
        """
        head = self._head
        if head is None:
            return None
        if body[:1] == b"\n":  # the blank line that ended the previous read's last frame
            body = body[1:]
        end = self._end  # SUFFIX + blank line
        # Complete the last frame's blank line, then cut after every frame.
        whole = body + (b"\n" if body[-1:] == b"\n" else b"\n\n")
        pieces = whole.split(end)
        if pieces.pop() != b"" or not pieces:
            return None
        skip = len(head)
        contents = [piece[skip:] for piece in pieces]
        joined = b"".join(contents)
        if (
            _UNSAFE_IN_BULK.search(joined)
            or b"" in contents
            or max(map(len, contents)) + self._overhead > max_line
            # The exact layout, byte for byte: every piece began with the head.
            or head + self._sep.join(contents) + end != whole
        ):
            return None
        try:
            return len(contents), joined.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def __call__(self, payload: bytes) -> str | None:
        prefix = self._prefix
        if prefix is not None:
            try:
                text = payload.decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                return None
            start = self._start
            if text.startswith(prefix) and text.startswith('"', start):
                try:
                    content, end = scanstring(text, start + 1, True)
                except ValueError:
                    return None
                if content and end == len(text) - self._tail and text.endswith(self._suffix):
                    return content
        split = _split(payload)
        if split is None:
            return None
        skeleton, start, content = split
        if not content or _skeletons.get(skeleton) != start:
            return None
        self._prefix, self._start = skeleton[:start], start
        self._suffix = skeleton[start:]
        self._tail = len(self._suffix)
        prefix = self._prefix.encode("utf-8", "surrogatepass")
        suffix = self._suffix.encode("utf-8", "surrogatepass")
        self._head = b"data: " + prefix + b'"'
        self._end = b'"' + suffix + b"\n\n"
        self._sep = self._end + self._head
        self._overhead = len(self._head) + len(self._end) - 2
        return content


def _learn(payload: bytes, frame: Frame) -> None:
    """Remember the skeleton of a plain token frame that `decode` accepted."""
    if frame.reasoning or frame.finish_reason is not None or frame.usage is not None:
        return
    split = _split(payload)
    if split is None:
        return
    skeleton, start, content = split
    if not content or content != frame.text or skeleton in _skeletons:
        return
    probe = skeleton[:start] + '"' + _SENTINEL + '"' + skeleton[start:]
    try:
        again = decode(probe.encode("utf-8", "surrogatepass"), learn=False)
    except Exception:  # noqa: BLE001 - not learnable, the full path stays in charge
        return
    if again != Frame(text=_SENTINEL_VALUE):
        return
    if len(_skeletons) >= _MAX_SKELETONS:
        _skeletons.clear()
    _skeletons[skeleton] = start


def decode(payload: bytes, *, learn: bool = True) -> Frame:
    frame = _decode(payload)
    if learn and frame.text and not frame.done:
        _learn(payload, frame)
    return frame


def _decode(payload: bytes) -> Frame:
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
