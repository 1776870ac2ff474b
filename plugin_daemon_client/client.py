"""`LLMClient`: stream a chat completion through the gate-aware transport.

The client builds the request for the route's protocol, decodes the event
stream into chunks, tells the gate when a *content token* arrives, and turns
every way a stream can end into exactly one outcome: chunks, then either a
clean finish or one typed error carrying what had arrived.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from . import errors
from .budgets import GateBudgets
from .errors import (
    ConnectionLostError,
    EmptyResponseError,
    FirstGateError,
    FrameTooLargeError,
    MalformedFrameError,
    StreamProgress,
    UnexpectedContentTypeError,
)
from .gate import Gate, GateTripped, current_gate
from .protocols import openai_compatible, plugin_daemon
from .protocols.frames import Frame, FrameError, Usage
from .protocols.request import PreparedRequest
from .sse import DEFAULT_MAX_LINE_BYTES, SSEDecoder, SSEViolation
from .transport import GatedTransport

Kind = Literal["openai-compatible", "plugin-daemon"]
_ERROR_BODY_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class LLMChunk:
    """One streamed piece of the reply. `text` is the delta ("" if none)."""

    text: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None


class LLMClient:
    """Streams chat completions from a Dify plugin daemon or an OpenAI-compatible server."""

    def __init__(
        self,
        kind: Kind = "openai-compatible",
        base_url: str = "",
        api_key: str | None = None,
        tenant_id: str | None = None,
        plugin_id: str | None = None,
        *,
        user_id: str = "firstgate",
        timeout: httpx.Timeout | None = None,
        limits: httpx.Limits | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        if kind not in ("openai-compatible", "plugin-daemon"):
            raise ValueError(
                f"LLMClient kind must be 'openai-compatible' or 'plugin-daemon', got {kind!r}"
            )
        if not base_url:
            raise ValueError("LLMClient needs a base_url")
        if kind == "plugin-daemon" and not tenant_id:
            raise ValueError("a plugin-daemon LLMClient needs a tenant_id")
        self.kind = kind
        self.base_url = base_url
        self._api_key = api_key
        self.tenant_id = tenant_id
        self.plugin_id = plugin_id
        self.user_id = user_id
        self._max_line = max_line_bytes
        self._http = httpx.Client(
            transport=GatedTransport(limits=limits),
            timeout=timeout or httpx.Timeout(600.0, connect=10.0),
        )

    def __repr__(self) -> str:  # never show the key
        return f"LLMClient(kind={self.kind!r}, base_url={errors.redact(self.base_url, self._secrets)!r})"

    @property
    def _secrets(self) -> tuple[str, ...]:
        return (self._api_key,) if self._api_key else ()

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
    ) -> Iterator[LLMChunk]:
        """Yield chunks as they arrive; raise one typed `FirstGateError` on failure.

        Deadlines come from the gate open in the caller's context
        (`first_token_gate`); without one, this is a plain httpx stream.
        """
        request = self._prepare(model, messages, parameters or {}, stop, provider, credentials)
        # Without a gate in the context the reads are plain; a private gate
        # object still keeps the progress that errors report.
        gate = current_gate() or Gate(GateBudgets())
        try:
            yield from self._stream(request, gate)
        except GateTripped as tripped:
            raise tripped.error from None
        except httpx.HTTPError as exc:
            if gate.tripped is not None:  # our own abort surfaced as a read error
                raise gate.tripped from None
            mapped = errors.map_transport_exception(
                exc, self._progress(gate), url=request.url, secrets=self._secrets
            )
            if mapped is None:
                raise
            raise mapped from None

    def _prepare(
        self,
        model: str,
        messages: list[dict[str, Any]],
        parameters: dict[str, Any],
        stop: list[str] | None,
        provider: str | None,
        credentials: dict[str, Any] | None,
    ) -> PreparedRequest:
        if self.kind == "openai-compatible":
            return openai_compatible.build_request(
                base_url=self.base_url,
                api_key=self._api_key,
                model=model,
                messages=messages,
                parameters=parameters,
                stop=stop,
            )
        return plugin_daemon.build_request(
            base_url=self.base_url,
            api_key=self._api_key,
            tenant_id=self.tenant_id or "",
            plugin_id=self.plugin_id,
            user_id=self.user_id,
            provider=provider or model,
            model=model,
            credentials=credentials or {},
            messages=messages,
            parameters=parameters,
            stop=stop,
        )

    def _decode(self, payload: bytes) -> Frame:
        if self.kind == "openai-compatible":
            return openai_compatible.decode(payload)
        return plugin_daemon.decode(payload, self._secrets)

    def _stream(self, request: PreparedRequest, gate: Gate) -> Iterator[LLMChunk]:
        with self._http.stream(
            "POST", request.url, headers=request.headers, content=json.dumps(request.body).encode()
        ) as response:
            if response.status_code >= 400:
                raise self._status_error(response)
            finished = False
            # Hot path: a plain content token of a known frame shape skips the
            # full JSON decode (see openai_compatible.TokenDecoder), and the
            # plain tokens that arrived in one read are delivered as one chunk.
            fast = openai_compatible.TokenDecoder() if self.kind == "openai-compatible" else None
            done = False
            for batch in self._batches(response, gate, fast):
                if isinstance(batch, tuple):  # a whole read of plain token frames
                    count, joined = batch
                    gate.note_tokens(count, joined)  # raises if the gate already ended
                    yield LLMChunk(joined)
                    continue
                texts: list[str] = []
                for payload in batch:
                    text = fast(payload) if fast is not None else None
                    if text:
                        texts.append(text)
                        continue
                    try:
                        frame = self._frame(payload, gate)
                    except FirstGateError:
                        if texts:  # tokens before the bad frame are delivered, never lost
                            yield self._deliver(texts, gate)
                        raise
                    if frame.done:
                        finished = done = True
                        break
                    if frame.text and not (frame.reasoning or frame.finish_reason or frame.usage):
                        texts.append(frame.text)
                        continue
                    if texts:  # keep the order: earlier tokens before this frame
                        yield self._deliver(texts, gate)
                        texts = []
                    chunk = self._accept(frame, gate)
                    finished = finished or bool(frame.finish_reason)
                    if chunk is not None:
                        yield chunk
                if texts:
                    yield self._deliver(texts, gate)
                if done:
                    break
            self._check_clean_end(gate, finished)

    @staticmethod
    def _deliver(texts: list[str], gate: Gate) -> LLMChunk:
        text = texts[0] if len(texts) == 1 else "".join(texts)
        gate.note_tokens(len(texts), text)  # raises if the gate already ended the stream
        return LLMChunk(text)

    def _batches(
        self,
        response: httpx.Response,
        gate: Gate,
        fast: openai_compatible.TokenDecoder | None,
    ) -> Iterator[list[bytes] | tuple[int, str]]:
        """Per read: its `data:` payloads, or (count, text) when the whole read
        was plain token frames of the learned shape."""
        content_type = response.headers.get("content-type", "")
        decoder = SSEDecoder(self._max_line)
        violation: SSEViolation | None = None
        try:
            for raw in response.iter_bytes():
                body = decoder.complete(raw)
                if body is None:
                    continue
                bulk = fast.bulk(body, self._max_line) if fast is not None else None
                yield bulk if bulk is not None else decoder.payloads_of(body)
            yield decoder.close()
        except SSEViolation as caught:
            violation = caught
        if violation is not None:
            # Raised outside the except block: the violation quotes raw server
            # bytes (which may echo a credential) and must not ride along as
            # the public error's __context__.
            raise self._violation(violation, content_type, gate)

    def _accept(self, frame: Frame, gate: Gate) -> LLMChunk | None:
        if frame.is_token:
            gate.note_tokens(1, frame.text)  # raises if the gate already ended the stream
        elif not (frame.finish_reason or frame.usage):
            return None  # role-only deltas, progress frames: nothing to deliver
        return LLMChunk(frame.text, frame.reasoning, frame.finish_reason, frame.usage)

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

    def _violation(self, violation: SSEViolation, content_type: str, gate: Gate) -> FirstGateError:
        progress = self._progress(gate)
        if violation.kind == "too_large":
            return FrameTooLargeError(progress=progress, limit=self._max_line)
        quote = errors.excerpt(violation.line, self._secrets)
        if "event-stream" not in content_type:
            return UnexpectedContentTypeError(
                progress=progress, content_type=content_type or "(none)", excerpt=quote
            )
        return MalformedFrameError(progress=progress, excerpt=quote)

    def _frame(self, payload: bytes, gate: Gate) -> Frame:
        try:
            return self._decode(payload)
        except errors.InvokeError as refusal:  # an error frame mid-stream
            refusal.progress = self._progress(gate)
            raise
        except FrameError as bad:
            excerpt = f"{bad.reason}: {errors.excerpt(bad.raw, self._secrets)}"
        # Raised outside the except block: the FrameError holds the raw payload
        # (which may echo a credential); only the redacted excerpt goes on.
        raise MalformedFrameError(progress=self._progress(gate), excerpt=excerpt)

    def _status_error(self, response: httpx.Response) -> errors.InvokeError:
        body = b""
        for part in response.iter_bytes():
            body += part
            if len(body) >= _ERROR_BODY_LIMIT:
                break
        retry_after = errors.parse_retry_after(response.headers.get("retry-after"))
        if self.kind == "plugin-daemon":
            return plugin_daemon.error_from_status(
                response.status_code, body, secrets=self._secrets, retry_after_s=retry_after
            )
        try:
            doc: object = json.loads(body)
        except (ValueError, RecursionError):
            doc = body
        return openai_compatible.error_from_body(
            response.status_code, doc, secrets=self._secrets, retry_after_s=retry_after
        )
