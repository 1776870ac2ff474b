"""A model call's telemetry: one span per target attempt, with OpenTelemetry's
GenAI attributes and what only the gate knows, and the call's metrics.

`invoke.py` opens `model_call(...)` around each target's gate (so every
fallback target is a span of its own, under the node's span that the
attempt's context carries) and reports into the `CallRecord` it yields: the
first content token, each probe verdict, the reply's usage and finish reason.
An error leaving the block is the attempt's outcome: its type, and for a gate
trip its typed cause (`firstgate.gate.cause`, a `firstgate.gate.trip` event,
the `firstgate_gate_trips` counter).

Model spans never carry prompt or answer text (this layer cannot redact a
run's secrets): with `capture_content` the node's span carries them, as the
run report redacted them.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from firstgate.common import metrics, telemetry

from .errors import StreamCancelledError, StreamTimeoutError

if TYPE_CHECKING:
    from firstgate.common.telemetry import Span

    from .first_token_budget import ResolvedBudget
    from .gate import Gate
    from .protocols.frames import Usage

# OpenTelemetry's `gen_ai.provider.name` for each wire protocol.
PROVIDER_NAMES: Mapping[str, str] = {
    "openai-compatible": "openai",
    "openai-responses": "openai",
    "azure-openai": "azure.ai.openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "ollama": "ollama",
    "plugin-daemon": "dify.plugin_daemon",
}
_REQUEST_PARAMETERS = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "max_tokens": "gen_ai.request.max_tokens",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
}

_current: contextvars.ContextVar[CallRecord | None] = contextvars.ContextVar(
    "firstgate_model_call", default=None
)


class CallRecord:
    """What one target attempt reports while it runs."""

    __slots__ = ("route", "span", "gate", "_started", "_first")

    def __init__(self, route: str, span: Span | None) -> None:
        self.route = route
        self.span = span
        self.gate: Gate | None = None
        self._started = time.monotonic()
        self._first = False

    def first_token(self) -> None:
        if self._first:
            return
        self._first = True
        ttft = time.monotonic() - self._started
        metrics.first_token(self.route, ttft)
        if self.span is not None:
            self.span.set_attribute("firstgate.ttft_s", round(ttft, 6))
            self.span.add_event("firstgate.first_token", {"firstgate.ttft_s": round(ttft, 6)})

    def probe(self, verdict: str | None) -> None:
        answer = verdict or "unknown"
        metrics.probe_verdict(self.route, answer)
        if self.span is not None:
            self.span.add_event("firstgate.probe", {"firstgate.probe.verdict": answer})

    def reply(self, usage: Usage | None, finish_reason: str | None) -> None:
        span = self.span
        if span is None:
            return
        if usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
        if finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])


def current_call() -> CallRecord | None:
    """The record of the target attempt running in this context, if any."""
    return _current.get()


def _attributes(
    route: str,
    kind: str,
    base_url: str | None,
    model: str,
    parameters: Mapping[str, Any],
    budget: ResolvedBudget,
) -> dict[str, Any]:
    provider = PROVIDER_NAMES.get(kind, kind)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,
        "gen_ai.request.model": model,
        "openinference.span.kind": "LLM",
        "llm.model_name": model,
        "firstgate.route": route,
        "firstgate.route.kind": kind,
        "firstgate.first_token.budget_source": budget.source,
    }
    if budget.first_token_s is not None:
        attributes["firstgate.first_token.budget_s"] = budget.first_token_s
    if budget.ceiling_s is not None:
        attributes["firstgate.first_token.ceiling_s"] = budget.ceiling_s
    for key, name in _REQUEST_PARAMETERS.items():
        value = parameters.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            attributes[name] = value
    if base_url:
        parts = urlsplit(base_url)
        if parts.hostname:
            attributes["server.address"] = parts.hostname
        if parts.port:
            attributes["server.port"] = parts.port
    return attributes


@contextmanager
def model_call(
    route: str,
    kind: str,
    base_url: str | None,
    model: str,
    parameters: Mapping[str, Any],
    budget: ResolvedBudget,
) -> Iterator[CallRecord | None]:
    """One target attempt's span (current while the block runs) and record;
    None when tracing and metrics are both off."""
    tracing = telemetry.active()
    if tracing is None and not metrics.enabled():
        yield None
        return
    if tracing is None:
        record = CallRecord(route, None)
        token = _current.set(record)
        try:
            yield record
        except StreamTimeoutError as exc:
            metrics.gate_trip(str(exc.deadline))
            raise
        finally:
            _current.reset(token)
        return
    attributes = _attributes(route, kind, base_url, model, parameters, budget)
    with telemetry.current_span(tracing, f"chat {model}" if model else "chat", attributes) as span:
        record = CallRecord(route, span)
        token = _current.set(record)
        try:
            yield record
            span.set_attribute("gen_ai.response.model", model)
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            if isinstance(exc, StreamTimeoutError) and exc.deadline is not None:
                cause = str(exc.deadline)
                metrics.gate_trip(cause)
                span.set_attribute("firstgate.gate.cause", cause)
                span.add_event(
                    "firstgate.gate.trip",
                    {"firstgate.gate.cause": cause, "firstgate.elapsed_s": exc.progress.elapsed_s},
                )
            if not isinstance(exc, StreamCancelledError):
                span.set_error(type(exc).__name__)
            raise
        finally:
            _current.reset(token)
            gate = record.gate
            if gate is not None:
                if gate.attempt_cap is not None:
                    span.set_attribute("firstgate.fallback.cap_s", gate.attempt_cap)
                if gate.extensions:
                    span.set_attribute("firstgate.wait.extensions", gate.extensions)
