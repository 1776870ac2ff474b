"""OpenAI-compatible chat completions (llama.cpp `llama-server`, vLLM, Ollama)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from json.decoder import scanstring
from typing import Any

from firstgate.common.redaction import ServerText

from ..errors import InvokeError, invoke_error_for_status
from .base import ChatCall, Item, StreamDecoder, WireProtocol
from .frames import DONE, Frame, FrameError, ToolCallDelta, Usage
from .json_body import JsonBody
from .request import PreparedRequest
from .sse_stream import SSEStream, item_of

_DONE_MARK = b"[DONE]"


class OpenAICompatible(WireProtocol):
    """`POST {base_url}/chat/completions` with `stream: true`; SSE frames of
    `chat.completion.chunk` objects ending with `data: [DONE]`."""

    kind = "openai-compatible"

    def request(self, call: ChatCall) -> PreparedRequest:
        body: dict[str, Any] = {
            **call.parameters,
            "model": call.model,
            "messages": call.messages,
            "stream": call.stream,
        }
        if call.stream:
            body.setdefault("stream_options", {"include_usage": True})
        else:
            body.pop("stream_options", None)
        if call.stop:
            body["stop"] = call.stop
        if call.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in call.tools
            ]
            if call.tool_choice:
                body["tool_choice"] = call.tool_choice
        if call.json_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": call.json_schema},
            }
        headers = {"Accept": "text/event-stream" if call.stream else "application/json"}
        if self.endpoint.api_key:
            headers["Authorization"] = f"Bearer {self.endpoint.api_key}"
        url = f"{self.endpoint.base_url.rstrip('/')}/chat/completions"
        return PreparedRequest(url=url, headers=headers, body=body)

    def status_error(self, status: int, body: bytes, *, retry_after_s: float | None) -> InvokeError:
        try:
            doc: object = json.loads(body.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            doc = body
        return error_from_body(status, doc, retry_after_s=retry_after_s)

    def decoder(self, max_line_bytes: int, *, stream: bool = True) -> StreamDecoder:
        return OpenAIStream(max_line_bytes) if stream else JsonBody(decode_completion)


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
# A stream has one or two token shapes (content, then maybe a changed id or
# timestamp); a bound keeps a hostile stream from growing the table.
_MAX_SKELETONS = 16
# What a JSON string body may not hold for `TokenDecoder.bulk` to take it as it is.
_UNSAFE_IN_BULK = re.compile(rb'["\\\x00-\x1f]')


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
    `decode`). One per stream: it learns the shapes of that stream's token frames
    (`learn`) and remembers the last one, so a frame of that shape costs one
    UTF-8 decode, two comparisons and the string scan of its content."""

    __slots__ = (
        "_skeletons",
        "_prefix",
        "_start",
        "_suffix",
        "_tail",
        "_head",
        "_end",
        "_sep",
        "_overhead",
    )

    def __init__(self) -> None:
        # skeleton -> where the content token starts; only plain token frames are kept.
        self._skeletons: dict[str, int] = {}
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
        if not content or self._skeletons.get(skeleton) != start:
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

    def learn(self, payload: bytes, frame: Frame) -> None:
        """Remember the skeleton of a plain token frame that `decode` accepted."""
        if not frame.text or frame.reasoning or frame.finish_reason is not None:
            return
        if frame.usage is not None or frame.done:
            return
        split = _split(payload)
        if split is None:
            return
        skeleton, start, content = split
        if not content or content != frame.text or skeleton in self._skeletons:
            return
        probe = skeleton[:start] + '"' + _SENTINEL + '"' + skeleton[start:]
        try:
            again = decode(probe.encode("utf-8", "surrogatepass"))
        except Exception:  # noqa: BLE001 - not learnable, the full path stays in charge
            return
        if again != Frame(text=_SENTINEL_VALUE):
            return
        if len(self._skeletons) >= _MAX_SKELETONS:
            self._skeletons.clear()
        self._skeletons[skeleton] = start


class OpenAIStream(SSEStream):
    """SSE frames, with the token fast path: a whole read of plain token frames of
    a learned shape at C speed (`TokenDecoder.bulk`), else per frame."""

    def __init__(self, max_line_bytes: int) -> None:
        super().__init__(decode, max_line_bytes)
        self._fast = TokenDecoder()
        self._max_line = max_line_bytes

    def feed(self, data: bytes) -> Iterable[Item]:
        body = self._lines.complete(data)
        if body is None:
            return ()
        run = self._fast.bulk(body, self._max_line)
        if run is not None:
            return (run,)
        return self.items(self._lines.payloads_of(body))

    def items(self, payloads: list[bytes]) -> Iterator[Item]:
        fast = self._fast
        for payload in payloads:
            text = fast(payload)
            if text:
                yield text
                continue
            frame = decode(payload)
            fast.learn(payload, frame)
            yield item_of(frame)


def decode(payload: bytes) -> Frame:
    """One `data:` payload as a frame (the full path)."""
    if payload == _DONE_MARK:
        return DONE
    try:
        # Invalid UTF-8 inside a token becomes U+FFFD, as the OpenAI clients
        # decode it: one bad byte sequence must not fail the whole reply.
        doc = json.loads(payload.decode("utf-8", "replace"))
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise FrameError("not JSON", payload) from exc
    if not isinstance(doc, dict):
        raise FrameError("not a JSON object", payload)
    if "error" in doc and doc["error"]:
        raise error_from_body(_status_of(doc["error"]), doc)
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
    return _message_frame(choice, "delta", usage, payload)


def decode_completion(body: bytes) -> Frame:
    """A whole non-streamed `chat.completion` as one frame."""
    try:
        doc = json.loads(body.decode("utf-8", "replace"))
    except (ValueError, RecursionError) as exc:
        raise FrameError("not JSON", body) from exc
    if not isinstance(doc, dict):
        raise FrameError("not a JSON object", body)
    if "error" in doc and doc["error"]:
        raise error_from_body(_status_of(doc["error"]), doc)
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise FrameError("no choices", body)
    return _message_frame(choices[0], "message", Usage.from_mapping(doc.get("usage")), body)


def _message_frame(choice: dict[str, Any], key: str, usage: Usage | None, raw: bytes) -> Frame:
    """A choice's `delta` (streamed) or `message` (whole reply) as a frame."""
    message = choice.get(key) or {}
    if not isinstance(message, dict):
        raise FrameError(f"{key} is not an object", raw)
    text = message.get("content") or ""
    reasoning = message.get("reasoning_content") or ""
    if not isinstance(text, str) or not isinstance(reasoning, str):
        raise FrameError("content is not a string", raw)
    calls = message.get("tool_calls")
    return Frame(
        text=text,
        reasoning=reasoning,
        finish_reason=choice.get("finish_reason"),
        usage=usage,
        tool_calls=tool_calls(calls, raw) if calls else (),
    )


def tool_calls(calls: object, raw: bytes) -> tuple[ToolCallDelta, ...]:
    if not isinstance(calls, list):
        raise FrameError("tool_calls is not a list", raw)
    found: list[ToolCallDelta] = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise FrameError("a tool call without a function", raw)
        index, call_id = call.get("index"), call.get("id") or ""
        name, arguments = function.get("name") or "", function.get("arguments") or ""
        if isinstance(arguments, dict):  # some servers send the arguments as an object
            arguments = json.dumps(arguments, ensure_ascii=False)
        if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str)):
            raise FrameError("a tool call field is not a string", raw)
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            raise FrameError("a tool call index is not a number", raw)
        found.append(ToolCallDelta(index, call_id, name, arguments))
    return tuple(found)


def _status_of(error: object) -> int:
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) and 400 <= code < 600 else 500


def error_from_body(
    status: int, body: object, *, retry_after_s: float | None = None
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
    cls = invoke_error_for_status(status)
    return cls(
        status=status,
        retry_after_s=retry_after_s,
        detail=ServerText(detail) if detail.strip() else f"HTTP {status}",
    )
