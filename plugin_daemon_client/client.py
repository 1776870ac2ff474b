"""`LLMClient`: stream a chat completion through the gate-aware transport.

The client holds one wire protocol (`protocols.PROTOCOLS[kind]`) and moves
bytes to frames to the gate: it tells the gate when a *content token*
arrives, and turns every way a stream can end into exactly one outcome:
chunks, then either a clean finish or one typed error carrying what had
arrived. Every error leaves through one exit, where the client's `Redactor`
scrubs it (`common/redaction.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
from firstgate.common.redaction import MIN_SECRET_CHARS, Redactor, ServerText
from firstgate.common.telemetry import with_traceparent

from . import errors
from .budgets import GateBudgets
from .errors import (
    ClientConfigError,
    ConnectionLostError,
    EmptyResponseError,
    FirstGateError,
    FrameTooLargeError,
    MalformedFrameError,
    RedirectError,
    ReplyTooLargeError,
    StreamProgress,
    Trip,
    TruncatedBodyError,
    UnexpectedContentTypeError,
)
from .gate import Gate, GateTripped, current_gate
from .protocols import PROTOCOLS, ChatCall, Endpoint, StreamDecoder, WireProtocol
from .protocols.base import DEFAULT_USER_ID, Item, ToolSpec, TruncatedFrame
from .protocols.frames import BODY_STARTED, Frame, FrameError, ToolCallDelta, Usage
from .protocols.request import PreparedRequest
from .sse import DEFAULT_MAX_LINE_BYTES, SSEViolation
from .transport import GatedTransport

# A reply's size on the wire, by default: far above any real completion (a
# 100k-token reply is a few MB of SSE), far below what exhausts memory.
DEFAULT_MAX_REPLY_BYTES = 64 * 1024 * 1024
_ERROR_BODY_LIMIT = 64 * 1024
# How long an error status's body may take to arrive: it only adds detail.
_ERROR_BODY_WAIT_S = 5.0


T = TypeVar("T")


def one_exit(stream: Iterator[T], gate: Gate, url: str, redactor: Redactor) -> Iterator[T]:
    """`stream`'s items; any way it fails becomes one typed `FirstGateError`,
    scrubbed by `redactor`, then raised outside any except block (no exception
    holding raw server bytes rides along as context)."""
    failure: FirstGateError
    try:
        yield from stream
        return
    except GateTripped as tripped:
        failure = tripped.error
    except FirstGateError as error:
        failure = error
    except httpx.HTTPError as exc:
        if gate.tripped is not None:  # our own abort surfaced as a transport error
            failure = gate.tripped
        else:
            progress = gate.progress
            progress.elapsed_s = gate.elapsed()
            mapped = errors.map_transport_exception(exc, progress, url=url)
            if mapped is None:
                raise
            failure = mapped
    raise redactor.scrub(failure)


@dataclass(frozen=True, slots=True)
class LLMChunk:
    """One streamed piece of the reply. `text` is the delta ("" if none)."""

    text: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    tool_calls: tuple[ToolCallDelta, ...] = ()


def _endpoint(
    base_url: str,
    api_key: str | None,
    tenant_id: str | None,
    plugin_id: str | None,
    user_id: str,
) -> Endpoint:
    if not base_url:
        raise ClientConfigError("errors.config.baseUrl")
    parts = urlsplit(base_url)
    if parts.username is not None or parts.password is not None:
        # Refused, never stripped: httpx would send them as Basic auth in place
        # of the key, and they would be printed wherever the URL is.
        raise ClientConfigError("errors.config.baseUrlCredentials")
    if api_key is not None and len(api_key) < MIN_SECRET_CHARS:
        raise ClientConfigError("errors.config.shortKey", min=MIN_SECRET_CHARS)
    return Endpoint(base_url, api_key or None, tenant_id, plugin_id, user_id)


class LLMClient:
    """Streams chat completions from a Dify plugin daemon or an OpenAI-compatible server."""

    def __init__(
        self,
        kind: str = "openai-compatible",
        base_url: str = "",
        api_key: str | None = None,
        tenant_id: str | None = None,
        plugin_id: str | None = None,
        *,
        user_id: str = DEFAULT_USER_ID,
        timeout: httpx.Timeout | None = None,
        limits: httpx.Limits | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        protocol = PROTOCOLS.get(kind)
        if protocol is None:
            raise ClientConfigError(
                "errors.config.kind", kind=repr(kind), known=", ".join(PROTOCOLS)
            )
        endpoint = _endpoint(base_url, api_key, tenant_id, plugin_id, user_id)
        self.protocol: WireProtocol = protocol(endpoint)
        self.base_url = base_url
        self._redactor = Redactor([api_key])
        self._max_line = max_line_bytes
        self._max_reply = max_reply_bytes
        self._http = httpx.Client(
            transport=GatedTransport(limits=limits),
            timeout=timeout or httpx.Timeout(600.0, connect=10.0),
        )

    @property
    def kind(self) -> str:
        return self.protocol.kind

    def __repr__(self) -> str:  # never show the key
        return f"LLMClient(kind={self.kind!r}, base_url={self._redactor.redact(self.base_url)!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the call ------------------------------------------------------------

    def invoke_llm(
        self,
        model: str,
        messages: list[dict[str, Any]],
        parameters: dict[str, Any] | None = None,
        stop: list[str] | None = None,
        *,
        provider: str | None = None,
        credentials: dict[str, Any] | None = None,
        tools: Iterable[ToolSpec] = (),
        tool_choice: str | None = None,
        json_schema: dict[str, Any] | None = None,
        stream: bool = True,
    ) -> Iterator[LLMChunk]:
        """Yield chunks as they arrive; raise one typed `FirstGateError` on failure.

        Deadlines come from the gate open in the caller's context
        (`first_token_gate`); without one, a gate without deadlines still keeps
        the progress that errors report. `stream=False` asks for one JSON body:
        its first byte ends the first-token wait, the stream cap bounds the rest,
        and it arrives as one chunk.
        """
        call = ChatCall(
            model,
            messages,
            parameters or {},
            stop,
            provider,
            credentials,
            tuple(tools),
            tool_choice,
            json_schema,
            stream,
        )
        request = self.protocol.request(call)
        # Without a gate in the context the reads are plain; a private gate
        # object still keeps the progress that errors report.
        gate = current_gate() or Gate(GateBudgets())
        yield from one_exit(self._stream(request, gate, stream), gate, request.url, self._redactor)

    def _stream(self, request: PreparedRequest, gate: Gate, stream: bool) -> Iterator[LLMChunk]:
        body = json.dumps(request.body).encode()
        headers = with_traceparent(request.headers)
        with self._http.stream("POST", request.url, headers=headers, content=body) as resp:
            status = resp.status_code
            if not 200 <= status < 300:
                raise self._status_error(resp, gate)
            content_type = resp.headers.get("content-type", "")
            decoder = self.protocol.decoder(self._max_line, stream=stream)
            finished = ended = False
            received = 0
            for raw in resp.iter_bytes():
                received += len(raw)
                if received > self._max_reply:
                    raise ReplyTooLargeError(progress=self._progress(gate), limit=self._max_reply)
                seen, ended = yield from self._deliver(
                    partial(decoder.feed, raw), decoder, content_type, gate
                )
                finished = finished or seen
                if ended:
                    break
            else:
                seen, ended = yield from self._deliver(decoder.close, decoder, content_type, gate)
                finished = finished or seen
            self._check_clean_end(gate, finished or ended)

    def _deliver(
        self,
        items: Callable[[], Iterable[Item]],
        decoder: StreamDecoder,
        content_type: str,
        gate: Gate,
    ) -> Iterator[LLMChunk]:
        """Chunks of one read's items. Plain tokens of one read go out as one chunk;
        order is kept around any other frame; tokens before a bad frame are
        delivered before its error. Returns (a finish reason arrived, the
        protocol's end marker arrived)."""
        texts: list[str] = []
        finished = False
        try:
            for item in items():
                if type(item) is str:
                    texts.append(item)
                    continue
                if type(item) is tuple:  # a whole read of plain tokens
                    count, text = item
                    gate.note_tokens(count, text)  # raises if the gate already ended
                    yield LLMChunk(text)
                    continue
                assert isinstance(item, Frame)
                if item is BODY_STARTED:
                    gate.note_first_content()
                    continue
                if item.done:
                    if texts:
                        yield self._chunk(texts, gate)
                    return finished, True
                if texts:
                    yield self._chunk(texts, gate)
                    texts = []
                chunk = self._accept(item, gate)
                finished = finished or bool(item.finish_reason)
                if chunk is not None:
                    yield chunk
        except (FrameError, SSEViolation, errors.InvokeError) as bad:
            if texts:  # tokens before the bad frame are delivered, never lost
                yield self._chunk(texts, gate)
            raise self._frame_failure(bad, decoder, content_type, gate) from None
        if texts:
            yield self._chunk(texts, gate)
        return finished, False

    @staticmethod
    def _chunk(texts: list[str], gate: Gate) -> LLMChunk:
        text = texts[0] if len(texts) == 1 else "".join(texts)
        gate.note_tokens(len(texts), text)  # raises if the gate already ended the stream
        return LLMChunk(text)

    @staticmethod
    def _accept(frame: Frame, gate: Gate) -> LLMChunk | None:
        if frame.is_token:
            gate.note_tokens(1, frame.text)  # raises if the gate already ended the stream
        elif not (frame.finish_reason or frame.usage):
            return None  # role-only deltas, progress frames: nothing to deliver
        return LLMChunk(
            frame.text, frame.reasoning, frame.finish_reason, frame.usage, frame.tool_calls
        )

    def _check_clean_end(self, gate: Gate, finished: bool) -> None:
        # A clean EOF after our own abort is that abort, never an empty success.
        gate.raise_if_tripped()
        progress = self._progress(gate)
        if progress.tokens == 0 and not finished:
            raise EmptyResponseError(progress=progress)
        if not finished:
            raise ConnectionLostError(
                progress=progress, detail="the stream ended without a finish marker"
            )

    # --- failures ------------------------------------------------------------

    @staticmethod
    def _progress(gate: Gate) -> StreamProgress:
        progress = gate.progress
        progress.elapsed_s = gate.elapsed()
        return progress

    def _frame_failure(
        self,
        bad: FrameError | SSEViolation | errors.InvokeError,
        decoder: StreamDecoder,
        content_type: str,
        gate: Gate,
    ) -> FirstGateError:
        progress = self._progress(gate)
        if isinstance(bad, errors.InvokeError):  # an error frame mid-stream
            bad.progress = progress
            return bad
        if isinstance(bad, TruncatedFrame):
            return TruncatedBodyError(progress=progress, excerpt=ServerText(bad.raw, quoted=True))
        if isinstance(bad, FrameError):
            quoted = ServerText(bad.raw, quoted=True, prefix=f"{bad.reason}: ")
            return MalformedFrameError(progress=progress, excerpt=quoted)
        if bad.kind == "too_large":
            return FrameTooLargeError(progress=progress, limit=self._max_line)
        quote = ServerText(bad.line, quoted=True)
        if decoder.media_type not in content_type:
            return UnexpectedContentTypeError(
                progress=progress, content_type=ServerText(content_type or "(none)"), excerpt=quote
            )
        return MalformedFrameError(progress=progress, excerpt=quote)

    def _status_error(self, response: httpx.Response, gate: Gate) -> FirstGateError:
        status = response.status_code
        if 300 <= status < 400:
            location = response.headers.get("location") or "?"
            return RedirectError(status=status, location=ServerText(location), code=status)
        # The status is the answer; the body only adds detail, so it may not
        # hold us longer than a short wait (a trickling 500 is still a 500).
        gate.await_error_body(_ERROR_BODY_WAIT_S)
        body = b""
        try:
            for part in response.iter_bytes():
                body += part
                if len(body) >= _ERROR_BODY_LIMIT:
                    break
        except GateTripped:
            if gate.fired is Trip.CANCELLED:
                raise
        except httpx.HTTPError:
            pass  # what arrived is the detail
        retry_after = errors.parse_retry_after(response.headers.get("retry-after"))
        return self.protocol.status_error(status, body, retry_after_s=retry_after)
