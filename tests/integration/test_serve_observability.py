"""`firstgate serve` seen by a tracing backend and a metrics server, both real:
a caller's `traceparent` continues into the run's trace in Arize Phoenix (a
malformed one starts a new trace), and Debian's Prometheus scrapes `/metrics`
and answers queries for the run, node, first-token and stream series."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests.phoenix_support import Phoenix
from tests.prometheus_support import prometheus_server
from tests.serve_support import Server, echo_model, serve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model() -> Iterator[str]:
    with echo_model() as base_url:
        yield base_url


@pytest.fixture(scope="module")
def server(
    model: str, phoenix: Phoenix, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp_path = tmp_path_factory.mktemp("observed")
    settings = {
        "providers": {"local": {"kind": "openai-compatible", "base_url": model}},
        "default": "local",
        "telemetry": {"otlp_endpoint": phoenix.traces_endpoint, "service_name": "firstgate-serve"},
    }
    path = tmp_path / "observed.yaml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    with serve(tmp_path, model, extra=("--models", str(path))) as running:
        yield running


def _run_story(server: Server, headers: dict[str, str] | None = None) -> str:
    with server.key_client("story") as client:
        reply = client.post(
            "/v1/workflows/run",
            json={"inputs": {"topic": "owls"}, "response_mode": "blocking", "user": "u1"},
            headers=headers or {},
        )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["data"]["status"] == "succeeded", body
    return str(body["workflow_run_id"])


def _story_runs(server: Server) -> int:
    """Stories the server counted so far (the module's other tests ran some)."""
    page = httpx.get(f"{server.url}/metrics", timeout=10).text
    for line in page.splitlines():
        if line.startswith('firstgate_runs_total{app="Story",status="succeeded"}'):
            return int(float(line.split()[-1]))
    return 0


def _run_span(phoenix: Phoenix, run_id: str) -> dict:
    (span,) = phoenix.find(lambda s: s["attributes"].get("firstgate.run.id") == run_id)
    return span


def test_a_callers_traceparent_continues_into_the_run(server: Server, phoenix: Phoenix) -> None:
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    run_id = _run_story(server, {"traceparent": f"00-{trace_id}-{parent_id}-01"})
    span = _run_span(phoenix, run_id)
    assert span["context"]["trace_id"] == trace_id
    assert span["parent_id"] == parent_id
    assert span["attributes"]["firstgate.app.name"] == "Story"
    nodes = phoenix.trace(trace_id, at_least=5)
    llm = next(s for s in nodes if s["attributes"].get("firstgate.node.type") == "llm")
    assert llm["parent_id"] == span["context"]["span_id"]
    (call,) = [s for s in nodes if s["parent_id"] == llm["context"]["span_id"]]
    assert call["attributes"]["gen_ai.request.model"] == "echo"
    assert call["attributes"]["gen_ai.usage.output_tokens"] > 0


@pytest.mark.parametrize(
    "header",
    [
        "not a traceparent",
        "00-" + "0" * 32 + "-" + "1" * 16 + "-01",  # an all-zero trace id is invalid
        "ff-" + "a" * 32 + "-" + "b" * 16 + "-01",  # version ff is forbidden
        "00-" + "a" * 32 + "-" + "b" * 16,  # no flags
        "00-" + "A" * 31 + "-" + "b" * 16 + "-01",
    ],
)
def test_a_malformed_traceparent_is_ignored_and_a_new_trace_starts(
    server: Server, phoenix: Phoenix, header: str
) -> None:
    run_id = _run_story(server, {"traceparent": header})
    span = _run_span(phoenix, run_id)
    assert span["parent_id"] is None
    assert span["context"]["trace_id"] not in header


def test_prometheus_scrapes_serve_and_answers_for_its_series(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        page = client.get("/metrics")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/plain")
    before = _story_runs(server)
    for _ in range(2):
        _run_story(server)
    with server.key_client("chat") as client:  # a streamed reply: an open stream, then closed
        with client.stream(
            "POST",
            "/v1/chat-messages",
            json={"inputs": {}, "query": "hi", "response_mode": "streaming", "user": "u1"},
        ) as reply:
            assert reply.status_code == 200
            for _ in reply.iter_lines():
                pass
    address = urlsplit(server.url).netloc
    with prometheus_server([address]) as prometheus:
        runs = prometheus.wait_for('firstgate_runs_total{app="Story",status="succeeded"}')
        assert runs, prometheus.targets()
        assert float(runs[0]["value"][1]) == before + 2 == _story_runs(server)
        assert runs[0]["metric"]["instance"] == address
        nodes = prometheus.wait_for('firstgate_node_duration_seconds_count{node_type="llm"}')
        # Every story and the chat turn ran one LLM node, each with one first token.
        assert float(nodes[0]["value"][1]) == before + 3
        ttft = prometheus.wait_for('firstgate_time_to_first_token_seconds_count{route="local"}')
        assert float(ttft[0]["value"][1]) == before + 3
        streams = prometheus.wait_for("firstgate_open_streams")
        assert float(streams[0]["value"][1]) == 0
        (target,) = prometheus.targets()
        assert target["health"] == "up"
