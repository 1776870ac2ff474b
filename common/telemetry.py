"""The process's tracing: spans of our own, exported over OTLP/HTTP.

One `Tracing` is installed per process by whoever opens the run resources
(`runtime/execution/resources.py`) from the settings file's `telemetry`
section, and removed when they close. While none is installed every function
here is a cheap no-op and no thread is started.

Why not OpenTelemetry's SDK: a template node costs about 55 µs of CPU, and
the SDK spends about 30-35 µs starting and ending a span and 57 µs encoding
it. Here a span is one small object: ids are random bits, times are
`time.time_ns()`, attributes a plain dict, and ending it is one append to a
bounded queue. Everything else happens on the export thread.

What this module owns, so that no other module repeats it:

- the exporter: batched (`_Exporter`, a background thread encoding with
  `common/otlp_encoding.py` and posting), so a run only appends to a queue;
  the queue is bounded (`MAX_QUEUE`: a span that does not fit is dropped, and
  that is logged once); a collector that hangs, answers 500 or is down costs
  the run nothing, and its failure is logged once;
- sampling: `sample_ratio` of new traces (by the trace id's low 64 bits, as
  OpenTelemetry's ratio sampler decides), a caller's `traceparent` decision
  wins, a span's children follow it;
- W3C trace context: `parent_from_traceparent` (a malformed header is
  ignored: a new trace starts) and `with_traceparent` (the current span's
  `traceparent` on an outgoing request's headers, unless `propagate` is off);
- the context a node attempt runs in (`activated`), so the model-call layer
  and the HTTP client find their parent span without being handed it.

Content (prompts, answers, node inputs and outputs) goes into spans only when
`capture_content` is on (`Tracing.capture_content`); callers redact it first.
"""

from __future__ import annotations

import collections
import contextvars
import http.client
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("firstgate.telemetry")

# A run must never wait for the collector; what waits is the export thread,
# and only this long per batch.
EXPORT_TIMEOUT_S = 5.0
# How long closing waits for the last spans to leave.
SHUTDOWN_TIMEOUT_MS = 2000
# After an export failed, runs make no spans for this long (a dead collector
# costs them nothing); the first run after it tries the collector again.
RETRY_AFTER_S = 30.0
# Spans waiting for the export thread; one more is dropped (and logged once).
MAX_QUEUE = 8192
# Spans per export request; how long a span may wait for the export thread,
# which is woken earlier only when this many wait (not in the middle of a
# typical run: its encoding would compete with the run for the GIL).
BATCH_SIZE = 512
SCHEDULE_DELAY_S = 1.0
WAKE_AT = MAX_QUEUE // 4

KIND_INTERNAL = 1
KIND_CLIENT = 3
STATUS_ERROR = 2

_MASK_64 = (1 << 64) - 1
_random = random.Random()  # its own generator: a seeded global one must not repeat ids


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


class Span:
    """One span while it is open and after it ended (then the export thread
    reads it). A span that is not sampled records nothing and is never queued,
    but still carries ids, so its children and `traceparent` follow it."""

    __slots__ = (
        "trace_id",
        "span_id",
        "parent_id",
        "name",
        "kind",
        "start_ns",
        "end_ns",
        "attributes",
        "events",
        "status",
        "status_message",
        "sampled",
        "remote",
        "_queue",
    )

    def __init__(
        self,
        queue: _Queue | None,
        trace_id: int,
        span_id: int,
        parent_id: int,
        name: str,
        kind: int,
        start_ns: int,
        attributes: dict[str, Any],
        sampled: bool,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id  # 0: a root span
        self.name = name
        self.kind = kind
        self.start_ns = start_ns
        self.end_ns = 0
        self.attributes = attributes
        self.events: list[tuple[int, str, Mapping[str, Any]]] | None = None
        self.status = 0
        self.status_message = ""
        self.sampled = sampled
        self.remote = False
        self._queue = queue

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.attributes.update(attributes)

    def add_event(self, name: str, attributes: Mapping[str, Any]) -> None:
        if self.events is None:
            self.events = []
        self.events.append((time.time_ns(), name, attributes))

    def set_error(self, message: str) -> None:
        self.status = STATUS_ERROR
        self.status_message = message

    def end(self, end_time: int | None = None) -> None:
        queue = self._queue
        if queue is None:  # not sampled, a remote parent, or ended already
            return
        self._queue = None
        self.end_ns = end_time or time.time_ns()
        queue.put(self)

    @property
    def traceparent(self) -> str:
        flags = "01" if self.sampled else "00"
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{flags}"


class _Queue:
    """The spans that ended, waiting for the export thread: appending is one
    `deque.append` (atomic under the GIL); past `MAX_QUEUE` a span is dropped."""

    def __init__(self, limit: int, wake: threading.Event) -> None:
        self.items: collections.deque[Any] = collections.deque()
        self.limit = limit
        self.dropped = 0
        self._wake = wake
        self._logged = False

    def put(self, item: Any) -> None:
        items = self.items
        size = len(items)
        if size >= self.limit:
            self.dropped += 1
            if not self._logged:
                self._logged = True
                from firstgate.locales import t

                log.warning(t("errors.telemetry.queueFull", None, limit=self.limit))
            return
        items.append(item)
        if size + 1 == WAKE_AT:
            self._wake.set()


class _FlushMark:
    """Put in the queue by `flush`: set once what was queued before it was exported."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


SpanExporter = Callable[[Sequence[Span]], bool]
"""Something that sends a batch of ended spans; True when the collector took it."""


class OtlpHttpExporter:
    """POSTs a batch as OTLP/HTTP protobuf to the collector's traces URL; one
    connection kept open, `EXPORT_TIMEOUT_S` for each request."""

    def __init__(self, config: TracingConfig) -> None:
        from firstgate.common.otlp_encoding import Encoder

        parts = urlsplit(config.endpoint)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = {
            **config.headers,
            "Content-Type": "application/x-protobuf",
            "User-Agent": "firstgate",
        }
        self._encoder = Encoder(config.service_name)
        self._connection: http.client.HTTPConnection | None = None

    def __call__(self, spans: Sequence[Span]) -> bool:
        body = self._encoder.encode(spans)
        try:
            connection = self._connection or self._connect()
            connection.request("POST", self._path, body=body, headers=self._headers)
            response = connection.getresponse()
            response.read()
            if response.will_close:
                self.close()
            return 200 <= response.status < 300
        except (OSError, http.client.HTTPException):
            self.close()
            return False

    def _connect(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        self._connection = kind(self._host, self._port, timeout=EXPORT_TIMEOUT_S)
        return self._connection

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


_logged: set[str] = set()  # endpoints whose failure was logged (once per process)


class _Exporter(threading.Thread):
    """The export thread: takes up to `BATCH_SIZE` spans at a time (when a batch
    is full, every `SCHEDULE_DELAY_S`, or when flushed) and sends them. It never
    raises; a failure is logged once per endpoint and process (again only after
    it recovered and failed anew) and suspends recording for `RETRY_AFTER_S`."""

    def __init__(self, send: SpanExporter, endpoint: str) -> None:
        super().__init__(name="firstgate-span-exporter", daemon=True)
        self.wake = threading.Event()
        self.queue = _Queue(MAX_QUEUE, self.wake)
        self._send = send
        self._endpoint = endpoint
        self._stopping = False
        self._failed_at: float | None = None
        self.failures = 0  # batches dropped (read by tests and the bench)

    @property
    def suspended(self) -> bool:
        failed = self._failed_at
        return failed is not None and time.monotonic() - failed < RETRY_AFTER_S

    def run(self) -> None:
        items = self.queue.items
        while True:
            self.wake.wait(SCHEDULE_DELAY_S)
            self.wake.clear()
            batch: list[Span] = []
            marks: list[_FlushMark] = []
            while items:
                item = items.popleft()
                if isinstance(item, _FlushMark):
                    marks.append(item)
                    self._export(batch)
                    batch = []
                    for mark in marks:
                        mark.done.set()
                    marks = []
                    continue
                batch.append(item)
                if len(batch) >= BATCH_SIZE:
                    self._export(batch)
                    batch = []
            self._export(batch)
            if self._stopping:
                return

    def _export(self, batch: list[Span]) -> None:
        if not batch:
            return
        try:
            ok = self._send(batch)
        except Exception:  # noqa: BLE001 - a broken collector must not kill the export thread
            ok = False
        if ok:
            self._failed_at = None
            _logged.discard(self._endpoint)
            return
        self.failures += 1
        self._failed_at = time.monotonic()
        if self._endpoint not in _logged:
            _logged.add(self._endpoint)
            from firstgate.locales import t

            log.warning(t("errors.telemetry.exportFailed", None, endpoint=self._endpoint))

    def flush(self, timeout_s: float) -> bool:
        mark = _FlushMark()
        self.queue.items.append(mark)  # past the bound too: it is not a span
        self.wake.set()
        return mark.done.wait(timeout_s)

    def stop(self, timeout_s: float) -> None:
        self._stopping = True
        self.wake.set()
        self.join(timeout_s)


class Tracing:
    """An installed tracer with its export thread; `close()` flushes (bounded)
    and uninstalls it."""

    def __init__(self, config: TracingConfig, exporter: SpanExporter | None = None) -> None:
        self.config = config
        self.capture_content = config.capture_content
        self.propagate = config.propagate
        self._send = exporter or OtlpHttpExporter(config)
        self.exporter = _Exporter(self._send, config.endpoint)
        self._queue = self.exporter.queue
        # A new trace is sampled when its id's low 64 bits are below this.
        self._bound = round(config.sample_ratio * (1 << 64))
        self.exporter.start()

    @property
    def recording(self) -> bool:
        """False while the collector is known to be failing (see `RETRY_AFTER_S`)."""
        return not self.exporter.suspended

    @property
    def dropped(self) -> int:
        """Spans dropped because the queue was full."""
        return self._queue.dropped

    def start_span(
        self,
        name: str,
        parent: Span | None,
        attributes: dict[str, Any],
        kind: int = KIND_INTERNAL,
        start_time: int | None = None,
    ) -> Span:
        """A span under `parent` (None: a new trace, sampled by `sample_ratio`).
        `attributes` becomes the span's own dict (not copied)."""
        span_id = _random.getrandbits(64) or 1
        if parent is None:
            trace_id = _random.getrandbits(128) or 1
            sampled = (trace_id & _MASK_64) < self._bound
            parent_id = 0
        else:
            trace_id = parent.trace_id
            sampled = parent.sampled
            parent_id = parent.span_id
        return Span(
            self._queue if sampled else None,
            trace_id,
            span_id,
            parent_id,
            name,
            kind,
            start_time or time.time_ns(),
            attributes,
            sampled,
        )

    def flush(self, timeout_ms: int = SHUTDOWN_TIMEOUT_MS) -> bool:
        return self.exporter.flush(timeout_ms / 1000)

    def close(self) -> None:
        uninstall(self)
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT_MS / 1000
        self.flush(SHUTDOWN_TIMEOUT_MS)
        self.exporter.stop(max(0.0, deadline - time.monotonic()))
        close = getattr(self._send, "close", None)
        if close is not None and not self.exporter.is_alive():
            close()


_lock = threading.Lock()
_active: Tracing | None = None
_current: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "firstgate_span", default=None
)


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


# W3C trace context, version 00 (a later version may append fields after a dash).
_TRACEPARENT = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\s]*)?", re.ASCII
)
_TRACEPARENT_MAX = 512


def parent_from_traceparent(value: object) -> Span | None:
    """The remote parent a W3C `traceparent` header names; None when tracing is
    off or the header is missing or malformed (the run starts a new trace)."""
    if active() is None or not isinstance(value, str) or len(value) > _TRACEPARENT_MAX:
        return None
    found = _TRACEPARENT.fullmatch(value.strip())
    if found is None:
        return None
    version, trace_hex, span_hex, flags, rest = found.groups()
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if version == "ff" or (version == "00" and rest) or not trace_id or not span_id:
        return None
    parent = Span(None, trace_id, span_id, 0, "", KIND_INTERNAL, 0, {}, int(flags, 16) & 1 == 1)
    parent.remote = True
    return parent


def current() -> Span | None:
    """The span current in this context (a node attempt's, a model call's)."""
    return _current.get()


def with_traceparent(headers: Mapping[str, str]) -> Mapping[str, str]:
    """`headers` plus the current span's `traceparent` (a copy); the same object
    when tracing or propagation is off, or no span is current."""
    tracing = _active
    if tracing is None or not tracing.propagate:
        return headers
    span = _current.get()
    if span is None:
        return headers
    return {**headers, "traceparent": span.traceparent}


def context_of(span: Span | None) -> Span | None:
    """What `activated` takes: the span to make current (kept as a function so
    callers need not know a context is a span here)."""
    return span


class activated:  # noqa: N801 - used as a function: `with activated(span):`
    """Run the block with `context` current (a node attempt under its node's
    span). A class, not a generator: it is entered for every node attempt."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: Span | None) -> None:
        self._context = context
        self._token: contextvars.Token[Span | None] | None = None

    def __enter__(self) -> None:
        if self._context is not None:
            self._token = _current.set(self._context)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None


@contextmanager
def current_span(tracing: Tracing, name: str, attributes: dict[str, Any]) -> Iterator[Span]:
    """A client span under the current span, current while the block runs and
    ended when it leaves."""
    span = tracing.start_span(name, _current.get(), attributes, KIND_CLIENT)
    token = _current.set(span)
    try:
        yield span
    finally:
        _current.reset(token)
        span.end()


@contextmanager
def client_span(name: str, attributes: Mapping[str, Any]) -> Iterator[Span | None]:
    """A client span under the current span (None when tracing is off); an
    exception leaving the block marks it failed with its type, never its text."""
    tracing = active()
    if tracing is None:
        yield None
        return
    with current_span(tracing, name, dict(attributes)) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_error(type(exc).__name__)
            raise
