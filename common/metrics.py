"""The process's Prometheus metrics: one registry, every series defined here.

Off until a process that serves `/metrics` turns them on (`enable()`: serve,
each Celery worker); until then every recording function is a check of one
global and nothing of `prometheus_client` is imported. Who records what:

- a run's facts (runs by app and status, node durations by type, retries,
  fallbacks): `runtime/execution/telemetry.py`, the run report's observer.
  Node durations are kept by the run and handed over in batches
  (`nodes_ended`: every `RUN_BATCH` nodes and at the run's end), so a node
  costs a list append, not a lock: a scrape sees a running run's nodes at the
  latest `RUN_BATCH` nodes late;
- a model call's (time to first token by route, gate trips by cause, probe
  verdicts): the invoke path (`plugin_daemon_client/invoke.py`);
- open event streams: serve's streaming replies (`serve/api.py`);
- the broker mode's queue depth (read when scraped), lease reaps and dead
  letters: `serve/distributed/`.

Label values are bounded sets (app names, node types, route names, typed
causes), never ids or free text.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
# Node durations a run keeps before it hands them to the histogram.
RUN_BATCH = 256
_TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class _Series:
    """The metric objects, on a registry of their own (not the library's global one)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = registry = CollectorRegistry()
        self.runs = Counter(
            "firstgate_runs", "Runs ended, by app and status", ("app", "status"), registry=registry
        )
        self.node_seconds = _Histogram(
            "firstgate_node_duration_seconds",
            "Node execution durations, by node type",
            "node_type",
            _DURATION_BUCKETS,
        )
        self.ttft = _Histogram(
            "firstgate_time_to_first_token_seconds",
            "Time from sending a model request to its first content token, by route",
            "route",
            _TTFT_BUCKETS,
        )
        registry.register(self.node_seconds)
        registry.register(self.ttft)
        self.gate_trips = Counter(
            "firstgate_gate_trips",
            "Model streams the gate ended, by cause",
            ("cause",),
            registry=registry,
        )
        self.probe_verdicts = Counter(
            "firstgate_probe_verdicts",
            "Liveness probe answers while waiting for a first token",
            ("route", "verdict"),
            registry=registry,
        )
        self.retries = Counter(
            "firstgate_node_retries",
            "Node attempts retried, by node type",
            ("node_type",),
            registry=registry,
        )
        self.fallbacks = Counter(
            "firstgate_fallbacks",
            "Fallback chain decisions (swap, cap, skip, budget), by kind and reason",
            ("kind", "reason"),
            registry=registry,
        )
        self.open_streams = Gauge(
            "firstgate_open_streams", "Event streams serve is sending now", registry=registry
        )
        self.queue_depth = Gauge(
            "firstgate_broker_queue_depth", "Runs waiting in the broker's queue", registry=registry
        )
        self.lease_reaps = Counter(
            "firstgate_lease_reaps",
            "Runs whose lease lapsed and that a sweeper re-queued or ended, by outcome",
            ("outcome",),
            registry=registry,
        )
        self.dead_letters = Counter(
            "firstgate_dead_letters", "Broker messages that were not runs", registry=registry
        )
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, kept: the library's lookup (a lock, checks)
        is most of what recording costs on a run's path."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found


class _Histogram:
    """A histogram with one label, kept in plain lists under one lock: the
    library's costs about 2 µs an observation, and node durations are observed
    on the path of every node (about 0.4 µs here). A collector of the registry."""

    def __init__(
        self, name: str, documentation: str, label: str, buckets: tuple[float, ...]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.label = label
        self._bounds = buckets
        self._rows: dict[str, list[float]] = {}  # label -> counts per bucket, +Inf, sum
        self._lock = threading.Lock()

    def observe(self, value: str, amount: float) -> None:
        slot = bisect.bisect_left(self._bounds, amount)  # the first bound >= amount
        with self._lock:
            row = self._rows.get(value)
            if row is None:
                row = self._rows[value] = [0.0] * (len(self._bounds) + 2)
            row[slot] += 1
            row[-1] += amount

    def observe_many(self, observations: list[tuple[str, float]]) -> None:
        """Each (label value, amount), under one hold of the lock."""
        bounds = self._bounds
        slots = [
            (value, bisect.bisect_left(bounds, amount), amount) for value, amount in observations
        ]
        with self._lock:
            rows = self._rows
            for value, slot, amount in slots:
                row = rows.get(value)
                if row is None:
                    row = rows[value] = [0.0] * (len(bounds) + 2)
                row[slot] += 1
                row[-1] += amount

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import HistogramMetricFamily

        family = HistogramMetricFamily(self.name, self.documentation, labels=[self.label])
        with self._lock:
            rows = {value: list(row) for value, row in self._rows.items()}
        for value, row in rows.items():
            buckets: list[tuple[str, float]] = []
            total = 0.0
            for bound, count in zip((*map(str, self._bounds), "+Inf"), row[:-1], strict=True):
                total += count
                buckets.append((bound, total))
            family.add_metric([value], buckets, sum_value=row[-1])
        yield family


_lock = threading.Lock()
_series: _Series | None = None
_queue_depth: Callable[[], int | None] | None = None


def enable() -> None:
    """Turn recording on in this process (idempotent)."""
    global _series
    with _lock:
        if _series is None:
            _series = _Series()


def enabled() -> bool:
    return _series is not None


def disable() -> None:
    """Turn recording off (tests and the bench); the series are dropped."""
    global _series, _queue_depth
    with _lock:
        _series = None
        _queue_depth = None


def watch_queue_depth(read: Callable[[], int | None]) -> None:
    """How to read the broker's queue depth; asked at each scrape."""
    global _queue_depth
    _queue_depth = read


def exposition() -> bytes:
    """The text a scrape of `/metrics` gets (empty when recording is off)."""
    series = _series
    if series is None:
        return b""
    from prometheus_client import generate_latest

    read = _queue_depth
    if read is not None:
        try:
            depth = read()
        except Exception:  # noqa: BLE001 - a broker that is down must not fail the scrape
            depth = None
        if depth is not None:
            series.queue_depth.set(depth)
    return generate_latest(series.registry)


# ---- recording (each a no-op while off)


def run_ended(app: str, status: str, durations: list[tuple[str, float]]) -> None:
    """A run ended: its status, and the node durations it still holds."""
    nodes_ended(durations)
    if (s := _series) is not None:
        s.child(s.runs, app, status).inc()


def nodes_ended(durations: list[tuple[str, float]]) -> None:
    """Node durations (node type, seconds) a run kept; the list is emptied."""
    if (s := _series) is not None and durations:
        s.node_seconds.observe_many(durations)
    durations.clear()


def first_token(route: str, seconds: float) -> None:
    if (s := _series) is not None:
        s.ttft.observe(route, seconds)


def gate_trip(cause: str) -> None:
    if (s := _series) is not None:
        s.child(s.gate_trips, cause).inc()


def probe_verdict(route: str, verdict: str) -> None:
    if (s := _series) is not None:
        s.child(s.probe_verdicts, route, verdict).inc()


def retry(node_type: str) -> None:
    if (s := _series) is not None:
        s.child(s.retries, node_type).inc()


def fallback(kind: str, reason: str) -> None:
    if (s := _series) is not None:
        s.child(s.fallbacks, kind, reason).inc()


def stream_opened() -> None:
    if (s := _series) is not None:
        s.open_streams.inc()


def stream_closed() -> None:
    if (s := _series) is not None:
        s.open_streams.dec()


def lease_reaped(outcome: str) -> None:
    if (s := _series) is not None:
        s.child(s.lease_reaps, outcome).inc()


def dead_letter() -> None:
    if (s := _series) is not None:
        s.dead_letters.inc()


def sample(name: str, labels: dict[str, str] | None = None) -> Any:
    """One sample's value from the registry (None when absent); for tests."""
    series = _series
    if series is None:
        return None
    return series.registry.get_sample_value(name, labels or {})
