"""Our span recorder and hand-written OTLP encoding, read back with OTLP's
reference protobuf classes (opentelemetry-proto); the export queue's bound
(drop, logged once) and sampling."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from firstgate.common import telemetry
from firstgate.common.otlp_encoding import Encoder
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.fakes.collector import MemoryExporter


@pytest.fixture
def tracing() -> Iterator[telemetry.Tracing]:
    tracing = telemetry.install(telemetry.TracingConfig(endpoint="http://unused"), MemoryExporter())
    yield tracing
    tracing.close()


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which)


def _decode(body: bytes) -> tuple[dict[str, Any], list[Any]]:
    request = ExportTraceServiceRequest.FromString(body)
    (resource_spans,) = request.resource_spans
    resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.scope.name == "firstgate"
    return resource, list(scope_spans.spans)


def test_every_field_and_attribute_type_reads_back(tracing: telemetry.Tracing) -> None:
    root = tracing.start_span("workflow ü", None, {"firstgate.run.id": "r-1"})
    child = tracing.start_span(
        "chat m",
        root,
        {"s": "v", "i": 7, "neg": -3, "f": 0.25, "b": True, "no": False, "list": ["stop", 2]},
        kind=telemetry.KIND_CLIENT,
    )
    long_text = "x" * 20_000  # past one-byte and two-byte lengths
    child.set_attribute("content", long_text)
    child.add_event("firstgate.probe", {"s": "v", "b": True})  # same pairs as the span's
    child.set_error("FirstTokenTimeoutError")
    child.end()
    root.end()
    assert tracing.flush()
    spans = tracing.exporter._send.spans  # type: ignore[attr-defined]
    resource, decoded = _decode(Encoder("svc").encode(spans))
    assert resource == {"service.name": "svc"}
    first, second = decoded
    assert first.name == "chat m" and second.name == "workflow ü"
    assert first.trace_id == root.trace_id.to_bytes(16, "big") == second.trace_id
    assert first.parent_span_id == root.span_id.to_bytes(8, "big")
    assert first.span_id == child.span_id.to_bytes(8, "big")
    assert second.parent_span_id == b""
    assert first.kind == 3 and second.kind == 1  # CLIENT, INTERNAL
    assert first.start_time_unix_nano == child.start_ns
    assert first.end_time_unix_nano == child.end_ns >= child.start_ns
    attributes = {kv.key: _value(kv.value) for kv in first.attributes}
    assert attributes == {
        "s": "v",
        "i": 7,
        "neg": -3,
        "f": 0.25,
        "b": True,
        "no": False,
        "list": ["stop", 2],
        "content": long_text,
    }
    (event,) = first.events
    assert event.name == "firstgate.probe"
    assert {kv.key: _value(kv.value) for kv in event.attributes} == {"s": "v", "b": True}
    assert first.status.code == 2 and first.status.message == "FirstTokenTimeoutError"
    assert second.status.code == 0


def test_a_cached_encoding_is_not_confused_between_equal_values() -> None:
    encoder = Encoder("svc")
    tracing = telemetry.Tracing(telemetry.TracingConfig(endpoint="http://unused"), MemoryExporter())
    try:
        one = tracing.start_span("a", None, {"k": 1})
        true = tracing.start_span("a", None, {"k": True})  # True == 1 in Python
        for span in (one, true):
            span.end_ns = span.start_ns
        _, (first, second) = _decode(encoder.encode([one, true]))
        assert _value(first.attributes[0].value) == 1
        assert second.attributes[0].value.WhichOneof("value") == "bool_value"
    finally:
        tracing.close()


class _Blocked:
    """An exporter that holds the export thread until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.spans = 0

    def __call__(self, spans: Any) -> bool:
        self.entered.set()
        self.release.wait(10)
        self.spans += len(spans)
        return True


def test_a_full_queue_drops_spans_and_logs_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="firstgate.telemetry")
    monkeypatch.setattr(telemetry, "MAX_QUEUE", 10)
    monkeypatch.setattr(telemetry, "WAKE_AT", 1)  # the first span wakes the thread
    blocked = _Blocked()
    tracing = telemetry.Tracing(telemetry.TracingConfig(endpoint="http://unused"), blocked)
    try:
        tracing.start_span("first", None, {}).end()
        assert blocked.entered.wait(10)  # the thread holds that one span
        for _ in range(25):
            tracing.start_span("s", None, {}).end()
        assert tracing.dropped == 15
        assert len(tracing.exporter.queue.items) == 10
        full = [r for r in caplog.records if "trace queue is full" in r.getMessage()]
        assert len(full) == 1
        blocked.release.set()
        assert tracing.flush(10_000)
        assert blocked.spans == 11
    finally:
        blocked.release.set()
        tracing.close()


@pytest.mark.parametrize(
    ("ratio", "low", "high"), [(0.0, 0, 0), (0.25, 150, 350), (1.0, 1000, 1000)]
)
def test_sample_ratio_decides_new_traces_and_children_follow(
    ratio: float, low: int, high: int
) -> None:
    memory = MemoryExporter()
    config = telemetry.TracingConfig(endpoint="http://unused", sample_ratio=ratio)
    tracing = telemetry.Tracing(config, memory)
    try:
        sampled = 0
        for _ in range(1000):
            root = tracing.start_span("r", None, {})
            child = tracing.start_span("c", root, {})
            assert child.sampled is root.sampled
            assert child.traceparent.endswith("-01" if root.sampled else "-00")
            child.end()
            root.end()
            sampled += root.sampled
        assert tracing.flush(10_000)
        assert low <= sampled <= high
        assert len(memory.spans) == 2 * sampled  # an unsampled span is never queued
    finally:
        tracing.close()


def test_a_callers_decision_wins_over_the_ratio(tracing: telemetry.Tracing) -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    unsampled = telemetry.parent_from_traceparent(f"00-{trace}-00f067aa0ba902b7-00")
    assert unsampled is not None and not unsampled.sampled
    child = tracing.start_span("run", unsampled, {})
    assert not child.sampled and child.traceparent.startswith(f"00-{trace}-")
    sampled = telemetry.parent_from_traceparent(f"00-{trace}-00f067aa0ba902b7-01")
    ratio_zero = telemetry.Tracing(
        telemetry.TracingConfig(endpoint="http://unused", sample_ratio=0.0), MemoryExporter()
    )
    try:
        assert ratio_zero.start_span("run", sampled, {}).sampled
    finally:
        ratio_zero.close()
