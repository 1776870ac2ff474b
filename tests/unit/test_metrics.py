"""The metrics registry: off until enabled, the histograms' buckets as
Prometheus counts them (a value equal to a bound is in that bucket), and the
text a scrape gets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from firstgate.common import metrics


@pytest.fixture(autouse=True)
def _off() -> Iterator[None]:
    metrics.disable()
    yield
    metrics.disable()


def test_off_records_nothing_and_scrapes_empty() -> None:
    metrics.nodes_ended([("llm", 1.0)])
    metrics.gate_trip("first_token")
    assert not metrics.enabled()
    assert metrics.exposition() == b""
    assert metrics.sample("firstgate_gate_trips_total", {"cause": "first_token"}) is None


def test_histogram_buckets_are_cumulative_and_bounds_inclusive() -> None:
    metrics.enable()
    held = [("llm", seconds) for seconds in (0.005, 0.006, 1.0)]
    metrics.nodes_ended(held)
    assert held == []  # handed over: the run's list is emptied
    metrics.run_ended("t", "succeeded", [("llm", 1000.0), ("code", 0.1)])

    def bucket(le: str, node_type: str = "llm") -> float | None:
        return metrics.sample(
            "firstgate_node_duration_seconds_bucket", {"node_type": node_type, "le": le}
        )

    assert bucket("0.005") == 1  # 0.005 <= 0.005
    assert bucket("0.025") == 2
    assert bucket("1.0") == 3
    assert bucket("300.0") == 3
    assert bucket("+Inf") == 4
    assert bucket("0.1", "code") == 1 and bucket("0.025", "code") == 0
    count = metrics.sample("firstgate_node_duration_seconds_count", {"node_type": "llm"})
    total = metrics.sample("firstgate_node_duration_seconds_sum", {"node_type": "llm"})
    assert count == 4 and total == pytest.approx(1001.011)


def test_the_scrape_page_has_every_series_and_a_broken_queue_reader_is_survived() -> None:
    metrics.enable()
    metrics.run_ended("Shop bot", "succeeded", [])
    metrics.first_token("local", 0.2)
    metrics.probe_verdict("local", "busy")
    metrics.retry("llm")
    metrics.fallback("swap", "FirstTokenTimeoutError")
    metrics.stream_opened()
    metrics.lease_reaped("requeue")
    metrics.dead_letter()

    def broken() -> int:
        raise ConnectionError("redis is down")

    metrics.watch_queue_depth(broken)
    page = metrics.exposition().decode()
    for line in (
        'firstgate_runs_total{app="Shop bot",status="succeeded"} 1.0',
        'firstgate_time_to_first_token_seconds_count{route="local"} 1.0',
        'firstgate_probe_verdicts_total{route="local",verdict="busy"} 1.0',
        'firstgate_node_retries_total{node_type="llm"} 1.0',
        'firstgate_fallbacks_total{kind="swap",reason="FirstTokenTimeoutError"} 1.0',
        "firstgate_open_streams 1.0",
        'firstgate_lease_reaps_total{outcome="requeue"} 1.0',
        "firstgate_dead_letters_total 1.0",
        "firstgate_broker_queue_depth 0.0",
    ):
        assert line in page, line
    metrics.watch_queue_depth(lambda: 7)
    assert "firstgate_broker_queue_depth 7.0" in metrics.exposition().decode()
