"""The Dify plugin daemon's tool dispatch: invoke a plugin's tool (or an
agent strategy plugin) and stream its tool messages.

Request: `POST {base}/plugin/{tenant_id}/dispatch/tool/invoke` with
`X-Api-Key` and `X-Plugin-ID` (the `org/plugin` part of a provider id
`org/plugin/provider`), body `{user_id, conversation_id, app_id, message_id,
data: {provider, tool, credentials, credential_type, tool_parameters}}`.
Response: SSE lines `data: {"code", "message", "data"}` whose `data` is one
tool message (`{type, message, meta}`, blobs base64-encoded); a non-zero
`code` is an error, unwrapped like the LLM dispatch's (`daemon_error`). An agent strategy goes
to `.../dispatch/agent_strategy/invoke` with `data: {agent_strategy_provider,
agent_strategy, agent_strategy_params}` and answers with the same envelopes
(its steps are `log` messages).

The call runs inside a gate with only a total deadline (the tool's time
bound): every connect and read is bounded by what is left of it, and a
cancel shuts the socket at once. The reply is bounded in bytes, each line
in length.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import nullcontext
from typing import Any

import httpx
from firstgate.common.cancel import Cancellable
from firstgate.common.redaction import MIN_SECRET_CHARS, Redactor, ServerText

from . import errors
from .client import DEFAULT_MAX_REPLY_BYTES, _endpoint, one_exit
from .errors import (
    ClientConfigError,
    MalformedFrameError,
    ProtocolError,
    StreamProgress,
)
from .gate import Gate, first_token_gate
from .protocols.base import DEFAULT_USER_ID
from .protocols.plugin_daemon import daemon_error, error_from_status
from .sse import SSEDecoder, SSEViolation
from .transport import GatedTransport

_ERROR_BODY_LIMIT = 64 * 1024


class ToolReplyTooLargeError(ProtocolError):
    """The tool's reply kept coming past the byte limit."""

    message_key = "errors.tool.replyTooLarge"


def split_provider_id(provider_id: str) -> tuple[str, str]:
    """`org/plugin/provider` -> (`org/plugin`, `provider`); a short id is its own provider."""
    parts = provider_id.split("/")
    if len(parts) >= 3:
        return "/".join(parts[:-1]), parts[-1]
    return "", provider_id


class PluginToolClient:
    """Invokes tools of the plugins a Dify plugin daemon runs."""

    def __init__(
        self,
        base_url: str,
        tenant_id: str,
        api_key: str | None = None,
        *,
        user_id: str = DEFAULT_USER_ID,
        max_line_bytes: int = 16 * 1024 * 1024,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        if not tenant_id:
            raise ClientConfigError("errors.config.daemonTenant")
        # The LLM client's checks: no credentials in the URL, no key too short to redact.
        endpoint = _endpoint(base_url, api_key, tenant_id, None, user_id)
        self.base_url = endpoint.base_url.rstrip("/")
        self.tenant_id = tenant_id
        self._api_key = endpoint.api_key
        self.user_id = user_id
        self._max_line = max_line_bytes
        self._max_reply = max_reply_bytes
        self._http = httpx.Client(transport=GatedTransport(), timeout=httpx.Timeout(None))

    def __repr__(self) -> str:  # never show the key
        return f"PluginToolClient({self.base_url!r}, tenant={self.tenant_id!r})"

    def close(self) -> None:
        self._http.close()

    def invoke(
        self,
        provider_id: str,
        tool: str,
        parameters: Mapping[str, Any],
        *,
        credentials: Mapping[str, Any] | None = None,
        timeout_s: float,
        cancel: Cancellable | None = None,
        secrets: tuple[str, ...] = (),
    ) -> Iterator[dict[str, Any]]:
        """Yield the tool's messages as decoded JSON objects; raise one typed
        `FirstGateError` on failure, scrubbed at one exit: `secrets` (the
        credentials' values) are redacted from it as the daemon key is."""
        plugin_id, provider = split_provider_id(provider_id)
        data = {
            "provider": provider,
            "tool": tool,
            "credentials": dict(credentials or {}),
            "credential_type": "api-key",
            "tool_parameters": dict(parameters),
        }
        return self._dispatch("tool/invoke", plugin_id, data, timeout_s, cancel, secrets)

    def invoke_agent_strategy(
        self,
        provider_id: str,
        strategy: str,
        parameters: Mapping[str, Any],
        *,
        timeout_s: float,
        cancel: Cancellable | None = None,
        secrets: tuple[str, ...] = (),
    ) -> Iterator[dict[str, Any]]:
        """Run an agent strategy plugin (`POST .../dispatch/agent_strategy/invoke`):
        its messages are tool messages too (text, json, log, ...), under the same
        deadline, caps and scrubbed exit as a tool call."""
        plugin_id, provider = split_provider_id(provider_id)
        data = {
            "agent_strategy_provider": provider,
            "agent_strategy": strategy,
            "agent_strategy_params": dict(parameters),
        }
        return self._dispatch(
            "agent_strategy/invoke", plugin_id, data, timeout_s, cancel, secrets, context={}
        )

    def _dispatch(
        self,
        action: str,
        plugin_id: str,
        data: dict[str, Any],
        timeout_s: float,
        cancel: Cancellable | None,
        secrets: tuple[str, ...],
        **extra: Any,
    ) -> Iterator[dict[str, Any]]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["X-Api-Key"] = self._api_key
        if plugin_id:
            headers["X-Plugin-ID"] = plugin_id
        body = {
            "user_id": self.user_id,
            "conversation_id": None,
            "app_id": None,
            "message_id": None,
            **extra,
            "data": data,
        }
        url = f"{self.base_url}/plugin/{self.tenant_id}/dispatch/{action}"
        # Shorter values cannot be told from ordinary words; the key itself is checked.
        redactor = Redactor(
            [self._api_key, *(s for s in secrets if s and len(s) >= MIN_SECRET_CHARS)]
        )
        with first_token_gate(stream_total_timeout=timeout_s) as gate:
            attach = cancel.attached(gate.cancel) if cancel is not None else nullcontext()
            with attach:
                yield from one_exit(self._stream(url, headers, body, gate), gate, url, redactor)

    def _stream(
        self, url: str, headers: dict[str, str], body: dict[str, Any], gate: Gate
    ) -> Iterator[dict[str, Any]]:
        content = json.dumps(body).encode()
        with self._http.stream("POST", url, headers=headers, content=content) as response:
            if response.status_code >= 400:
                raise self._status_error(response)
            decoder = SSEDecoder(self._max_line)
            received = 0
            violation: SSEViolation | None = None
            try:
                for raw in response.iter_bytes():
                    received += len(raw)
                    if received > self._max_reply:
                        raise ToolReplyTooLargeError(
                            progress=_progress(gate), limit=self._max_reply
                        )
                    for payload in decoder.feed(raw):
                        yield self._message(payload, gate)
                for payload in decoder.close():
                    yield self._message(payload, gate)
            except SSEViolation as caught:
                violation = caught
            if violation is not None:  # raised outside: the violation quotes raw bytes
                raise MalformedFrameError(
                    progress=_progress(gate), excerpt=ServerText(violation.line, quoted=True)
                )
            gate.raise_if_tripped()

    def _message(self, payload: bytes, gate: Gate) -> dict[str, Any]:
        try:
            envelope = json.loads(payload.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            envelope = None
        if not isinstance(envelope, dict) or "code" not in envelope:
            raise MalformedFrameError(
                progress=_progress(gate), excerpt=ServerText(payload, quoted=True)
            )
        if envelope["code"] != 0:
            refusal = daemon_error(envelope.get("message"))
            refusal.progress = _progress(gate)
            raise refusal
        data = envelope.get("data")
        if not isinstance(data, dict):
            raise MalformedFrameError(
                progress=_progress(gate), excerpt=ServerText(payload, quoted=True)
            )
        return data

    @staticmethod
    def _status_error(response: httpx.Response) -> errors.InvokeError:
        body = b""
        for part in response.iter_bytes():
            body += part
            if len(body) >= _ERROR_BODY_LIMIT:
                break
        retry_after = errors.parse_retry_after(response.headers.get("retry-after"))
        return error_from_status(response.status_code, body, retry_after_s=retry_after)


def _progress(gate: Gate) -> StreamProgress:
    progress = gate.progress
    progress.elapsed_s = gate.elapsed()
    return progress
