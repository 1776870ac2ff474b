"""Telemetry of whole runs against real loopback servers: broken collectors
(500, hanging, down) never hold a run up and are logged once; container
rounds nest under their iteration; the run's facts reach the Prometheus
series (gate trips by cause, probe verdicts, retries, fallbacks)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from firstgate.common import metrics, telemetry
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.execution.resources import RunResources
from firstgate.runtime.models.breakers import reset_shared_breakers
from firstgate.runtime.settings import RuntimeSettings

from tests.connect_support import chain_flow
from tests.fakes import llm_server as fake
from tests.fakes import model_answers as ma
from tests.fakes import probe_server as ps
from tests.fakes.collector import (
    FailingCollector,
    HangingCollector,
    MemoryExporter,
    nothing_listening,
)
from tests.integration.test_containers import edge, template, words_flow
from tests.run_events import final

TEMPLATES = chain_flow(
    [(f"t{i}", "template-transform", {"template": f"step {i}", "variables": []}) for i in range(5)],
    {"out": ["t4", "output"]},
)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    reset_shared_breakers()
    yield
    reset_shared_breakers()
    metrics.disable()


def _resources(endpoint: str) -> RunResources:
    settings = RuntimeSettings.model_validate({"telemetry": {"otlp_endpoint": endpoint}})
    return RunResources.open(settings)


def _run(resources: RunResources, document: dict[str, Any] = TEMPLATES) -> ev.WorkflowFinished:
    events = list(load_workflow(document).run({}, resources=resources))
    return final(events)


def _export_failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "Traces could not be sent" in r.getMessage()]


@pytest.mark.parametrize("collector", ["500", "down"])
def test_a_collector_that_fails_drops_the_spans_and_is_logged_once(
    collector: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="firstgate.telemetry")
    failing = FailingCollector() if collector == "500" else None
    endpoint = failing.endpoint if failing is not None else nothing_listening()
    with failing or _nothing(), _resources(endpoint) as resources:
        tracing = telemetry.active()
        assert tracing is not None
        assert _run(resources).status == "succeeded"
        tracing.flush()
        assert tracing.exporter.failures == 1
        # The collector failed: the next runs make no spans (nothing to export)...
        assert telemetry.active() is None
        for _ in range(2):
            assert _run(resources).status == "succeeded"
            tracing.flush()
        assert tracing.exporter.failures == 1
        # ...until the retry window has passed: then the collector is tried again.
        monkeypatch.setattr(telemetry, "RETRY_AFTER_S", 0.0)
        assert telemetry.active() is tracing
        assert _run(resources).status == "succeeded"
        tracing.flush()
        assert tracing.exporter.failures == 2
        if failing is not None:
            assert failing.exports == 2  # the collector was asked exactly then
    assert len(_export_failures(caplog)) == 1
    assert telemetry.active() is None  # closed with the resources that installed it


def test_a_collector_that_hangs_does_not_hold_a_run_up() -> None:
    with HangingCollector() as collector, _resources(collector.endpoint) as resources:
        tracing = telemetry.active()
        assert tracing is not None
        assert _run(resources).status == "succeeded"
        # The export thread sends the first run's spans and waits for an answer
        # that never comes; the next runs go on meanwhile.
        flushing = threading.Thread(target=tracing.flush, args=(10_000,), daemon=True)
        flushing.start()
        assert collector.received.wait(10)
        for _ in range(3):
            assert _run(resources).status == "succeeded"
        assert collector.holding >= 1 and flushing.is_alive()


class _nothing:  # noqa: N801 - a context manager that does nothing
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def spans() -> Iterator[MemoryExporter]:
    exporter = MemoryExporter()
    tracing = telemetry.install(telemetry.TracingConfig(endpoint="http://unused"), exporter)
    yield exporter
    tracing.close()


def test_container_rounds_nest_under_their_iteration(spans: MemoryExporter) -> None:
    document = words_flow(
        [template("up", "{{ w | upper }}", "it", w=["it", "item"])],
        [edge("itstart", "up")],
        ["up", "output"],
    )
    done = final(list(load_workflow(document).run({})))
    assert done.outputs == {"out": ["ANT", "BEE", "CAT", "DOG"]}
    telemetry.active().flush()  # type: ignore[union-attr]
    finished = spans.spans
    by_id = {s.span_id: s for s in finished}
    (iteration,) = [s for s in finished if s.attributes.get("firstgate.node.type") == "iteration"]
    rounds = sorted(
        (s for s in finished if s.name.startswith("iteration round")),
        key=lambda s: s.attributes["firstgate.round.index"],
    )
    assert [r.attributes["firstgate.round.index"] for r in rounds] == [0, 1, 2, 3]
    assert all(r.parent_id == iteration.span_id for r in rounds)
    inner = [s for s in finished if s.attributes.get("firstgate.node.id") == "up"]
    assert len(inner) == 4
    for node in inner:
        parent = by_id[node.parent_id]
        assert parent.name == f"iteration round {node.attributes['firstgate.round.index']}"
        assert parent.start_ns <= node.start_ns and node.end_ns <= parent.end_ns
    assert all(r.end_ns <= iteration.end_ns for r in rounds)


def test_the_runs_facts_reach_the_metrics() -> None:
    metrics.enable()
    llm = {
        "model": {"provider": "primary", "name": "m", "mode": "chat"},
        "prompt_template": [{"role": "user", "text": "hi"}],
        "retry_config": {"retry_enabled": True, "max_retries": 1, "retry_interval": 0},
    }
    document = chain_flow([("answer", "llm", llm)], {"text": ["answer", "text"]})
    with (
        ps.ProbeServer(slots=ps.always_idle(), chat=ma.answer("late", delay=30)) as primary,
        fake.FakeLLMServer(ma.in_turn(fake.http_error(500), fake.tokens(["Hel", "lo"]))) as backup,
    ):
        settings = RuntimeSettings.model_validate(
            {
                "providers": {
                    "primary": {
                        "kind": "openai-compatible",
                        "base_url": primary.base_url,
                        "probe": "llama.cpp-slots",
                        "fallbacks": ["backup"],
                        "first_token_timeout_s": 0.3,
                        "allow_same_host_fallback": True,
                    },
                    "backup": {
                        "kind": "openai-compatible",
                        "base_url": backup.base_url,
                        "probe": "off",
                    },
                }
            }
        )
        done = final(list(load_workflow(document).run({}, settings=settings)))
    assert done.status == "succeeded"
    assert metrics.sample("firstgate_runs_total", {"app": "t", "status": "succeeded"}) == 1
    assert metrics.sample("firstgate_gate_trips_total", {"cause": "first_token"}) == 2
    idle = {"route": "primary", "verdict": "idle"}
    assert metrics.sample("firstgate_probe_verdicts_total", idle) == 2
    assert metrics.sample("firstgate_node_retries_total", {"node_type": "llm"}) == 1
    swap = {"kind": "swap", "reason": "FirstTokenTimeoutError"}
    assert metrics.sample("firstgate_fallbacks_total", swap) == 2
    assert metrics.sample("firstgate_time_to_first_token_seconds_count", {"route": "backup"}) == 1
    assert metrics.sample("firstgate_node_duration_seconds_count", {"node_type": "llm"}) == 1
    assert b"firstgate_gate_trips_total" in metrics.exposition()


def test_a_code_nodes_job_is_a_span_under_the_node(spans: MemoryExporter) -> None:
    code = {
        "code_language": "python3",
        "code": "def main():\n    return {'y': 21 * 2}\n",
        "variables": [],
        "outputs": {"y": {"type": "number", "children": None}},
    }
    document = chain_flow([("calc", "code", code)], {"y": ["calc", "y"]})
    done = final(list(load_workflow(document).run({})))
    assert done.outputs == {"y": 42}, done
    telemetry.active().flush()  # type: ignore[union-attr]
    finished = spans.spans
    (node,) = [s for s in finished if s.attributes.get("firstgate.node.id") == "calc"]
    (job,) = [s for s in finished if s.name == "code python3"]
    assert job.parent_id == node.span_id
    assert job.attributes["firstgate.code.executor"] == "ProcessSandbox"


def test_a_running_runs_node_durations_reach_the_metrics_in_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metrics.enable()
    monkeypatch.setattr(metrics, "RUN_BATCH", 2)
    seen: list[float | None] = []
    for event in load_workflow(TEMPLATES).run({}):
        if isinstance(event, ev.NodeFinished) and event.node_type == "template-transform":
            seen.append(
                metrics.sample(
                    "firstgate_node_duration_seconds_count", {"node_type": "template-transform"}
                )
            )
    # Handed over every two nodes while the run went on, the rest at its end.
    assert seen[3] is not None and seen[3] >= 2
    count = {"node_type": "template-transform"}
    assert metrics.sample("firstgate_node_duration_seconds_count", count) == 5
