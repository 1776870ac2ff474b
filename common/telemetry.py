"""The process's tracing: OpenTelemetry spans exported over OTLP/HTTP.

One `Tracing` is installed per process by whoever opens the run resources
(`runtime/execution/resources.py`) from the settings file's `telemetry`
section, and removed when they close. While none is installed every function
here is a cheap no-op and OpenTelemetry's SDK is never imported.

What this module owns, so that no other module repeats it:

- the exporter: batched (`BatchSpanProcessor`, a background thread) so a run
  only appends to a queue; a collector that hangs, answers 500 or is down
  costs the run nothing, and its failure is logged once (the SDK's own
  per-batch warnings are silenced);
- W3C trace context: `parent_from_traceparent` (a malformed header is
  ignored: a new trace starts) and `with_traceparent` (the current span's
  `traceparent` on an outgoing request's headers, unless `propagate` is off);
- the context a node attempt runs in (`activated`), so the model-call layer
  and the HTTP client find their parent span without being handed it.

Content (prompts, answers, node inputs and outputs) goes into spans only when
`capture_content` is on (`Tracing.capture_content`); callers redact it first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import Span, Tracer

log = logging.getLogger("firstgate.telemetry")

# A run must never wait for the collector; what waits is the export thread,
# and only this long per batch (the SDK retries within it).
EXPORT_TIMEOUT_S = 5.0
# How long closing waits for the last spans to leave.
SHUTDOWN_TIMEOUT_MS = 2000
# After an export failed, runs make no spans for this long (a dead collector
# costs them nothing); the first run after it tries the collector again.
RETRY_AFTER_S = 30.0
_QUIET_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.http",
    "opentelemetry.sdk._shared_internal",
)


@dataclass(frozen=True, slots=True)
class TracingConfig:
    """What the settings file says (`common/telemetry_settings.py`), resolved:
    the endpoint is the collector's traces URL, `headers` hold the values read
    from the environment (never printed)."""

    endpoint: str
    service_name: str = "firstgate"
    sample_ratio: float = 1.0
    capture_content: bool = False
    propagate: bool = True
    headers: Mapping[str, str] = field(default_factory=dict)


class Tracing:
    """An installed tracer provider with its batch exporter; `close()` flushes
    (bounded) and uninstalls it."""

    def __init__(self, config: TracingConfig, exporter: SpanExporter | None = None) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        self.config = config
        self.capture_content = config.capture_content
        self.propagate = config.propagate
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        inner = exporter or OTLPSpanExporter(
            endpoint=config.endpoint, headers=dict(config.headers), timeout=EXPORT_TIMEOUT_S
        )
        self.exporter = _GuardedExporter(inner, config.endpoint)
        self._processor = BatchSpanProcessor(self.exporter)
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": config.service_name}),
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
        )
        self._provider.add_span_processor(self._processor)
        self.tracer: Tracer = self._provider.get_tracer("firstgate")

    @property
    def recording(self) -> bool:
        """False while the collector is known to be failing (see `RETRY_AFTER_S`)."""
        return not self.exporter.suspended

    def flush(self, timeout_ms: int = SHUTDOWN_TIMEOUT_MS) -> bool:
        return bool(self._processor.force_flush(timeout_ms))

    def close(self) -> None:
        uninstall(self)
        # The SDK's own shutdown waits up to 30 s for a collector that hangs; its
        # batch processor takes a bound (a private attribute: the public call has none).
        inner = getattr(self._processor, "_batch_processor", None)
        if inner is not None:
            inner.shutdown(timeout_millis=SHUTDOWN_TIMEOUT_MS)
        else:
            self._processor.shutdown()


_logged: set[str] = set()  # endpoints whose failure was logged (once per process)


class _GuardedExporter:
    """The OTLP exporter: it never raises into the export thread; a failure is
    logged once per endpoint and process (again only after it recovered and
    failed anew) and suspends recording for `RETRY_AFTER_S`."""

    def __init__(self, inner: SpanExporter, endpoint: str) -> None:
        self._inner = inner
        self._endpoint = endpoint
        self._failed_at: float | None = None
        self.failures = 0  # batches dropped (read by tests and the bench)

    @property
    def suspended(self) -> bool:
        failed = self._failed_at
        return failed is not None and time.monotonic() - failed < RETRY_AFTER_S

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self._inner.export(spans)
        except Exception:  # noqa: BLE001 - a broken collector must not kill the export thread
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self._failed_at = None
            _logged.discard(self._endpoint)
            return result
        self.failures += 1
        self._failed_at = time.monotonic()
        if self._endpoint not in _logged:
            _logged.add(self._endpoint)
            from firstgate.locales import t

            log.warning(t("errors.telemetry.exportFailed", None, endpoint=self._endpoint))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


_lock = threading.Lock()
_active: Tracing | None = None


def install(config: TracingConfig, exporter: SpanExporter | None = None) -> Tracing:
    """Install tracing for this process (replacing what was installed)."""
    global _active
    tracing = Tracing(config, exporter)
    with _lock:
        _active = tracing
    return tracing


def uninstall(tracing: Tracing) -> None:
    global _active
    with _lock:
        if _active is tracing:
            _active = None


def use(tracing: Tracing | None) -> None:
    """Make `tracing` (installed before) the process's again, or none (the benchmark)."""
    global _active
    with _lock:
        _active = tracing


def active() -> Tracing | None:
    """The installed tracing, or None: tracing is off, or suspended while its
    collector is failing."""
    tracing = _active
    if tracing is None or not tracing.recording:
        return None
    return tracing


def parent_from_traceparent(value: object) -> Context | None:
    """The remote parent a W3C `traceparent` header names; None when tracing is
    off or the header is missing or malformed (the run starts a new trace)."""
    if active() is None or not isinstance(value, str):
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = TraceContextTextMapPropagator().extract({"traceparent": value})
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def with_traceparent(headers: Mapping[str, str]) -> Mapping[str, str]:
    """`headers` plus the current span's `traceparent` (a copy); the same object
    when tracing or propagation is off, or no span is current."""
    tracing = active()
    if tracing is None or not tracing.propagate:
        return headers
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier:
        return headers
    return {**headers, **carrier}


def context_of(span: Span | None) -> Context | None:
    """The context in which `span` is the current span (for `activated`)."""
    if span is None:
        return None
    from opentelemetry import trace

    return trace.set_span_in_context(span)


@contextmanager
def activated(context: Context | None) -> Iterator[None]:
    """Run the block with `context` current (a node attempt under its node's span)."""
    if context is None:
        yield
        return
    from opentelemetry import context as otel_context

    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextmanager
def client_span(name: str, attributes: Mapping[str, Any]) -> Iterator[Span | None]:
    """A client span under the current span (None when tracing is off); an
    exception leaving the block marks it failed with its type, never its text."""
    tracing = active()
    if tracing is None:
        yield None
        return
    from opentelemetry.trace import SpanKind, StatusCode

    with tracing.tracer.start_as_current_span(
        name,
        kind=SpanKind.CLIENT,
        attributes=dict(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(StatusCode.ERROR, type(exc).__name__)
            raise
