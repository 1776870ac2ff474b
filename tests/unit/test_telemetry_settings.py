"""The `telemetry` settings section, the W3C `traceparent` reading, and the
cost of telemetry being off (no export thread, no encoder, no prometheus_client)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from firstgate.common import telemetry
from firstgate.common.problems import DslError
from firstgate.runtime.settings import load_settings

from tests.fakes.collector import MemoryExporter


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "settings.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DslError) as info:
        load_settings(path)
    return [problem.render() for problem in info.value.problems]


def test_an_endpoint_with_credentials_is_refused_without_showing_them(tmp_path: Path) -> None:
    text = "telemetry: {otlp_endpoint: 'https://me:hunter22@collector.example/v1/traces'}\n"
    (message,) = problems(tmp_path, text)
    assert "otlp_endpoint must not contain credentials" in message
    assert "telemetry.otlp_endpoint" in message  # where
    assert "hunter22" not in message and "me:" not in message
    # A user name alone may be a key: refused too.
    (message,) = problems(tmp_path, "telemetry: {otlp_endpoint: 'http://key@c.example/v1'}\n")
    assert "must not contain credentials" in message and "key@" not in message


@pytest.mark.parametrize("endpoint", ["collector:4318", "ftp://c.example/v1/traces", "http://"])
def test_an_endpoint_that_is_not_an_http_url_is_refused(tmp_path: Path, endpoint: str) -> None:
    (message,) = problems(tmp_path, f"telemetry: {{otlp_endpoint: '{endpoint}'}}\n")
    assert "must be an http:// or https:// URL" in message


@pytest.mark.parametrize("ratio", ["-0.1", "1.5", "nope"])
def test_a_sample_ratio_outside_zero_to_one_is_refused(tmp_path: Path, ratio: str) -> None:
    text = (
        f"telemetry: {{otlp_endpoint: 'http://127.0.0.1:4318/v1/traces', sample_ratio: {ratio}}}\n"
    )
    (message,) = problems(tmp_path, text)
    assert "sample_ratio" in message


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    (message,) = problems(tmp_path, "telemetry: {otlp_endpoit: 'http://c.example/v1/traces'}\n")
    assert "otlp_endpoit" in message


def test_headers_come_from_the_environment_and_no_endpoint_is_no_tracing(tmp_path: Path) -> None:
    path = tmp_path / "settings.yml"
    path.write_text(
        "telemetry:\n"
        "  otlp_endpoint: https://cloud.langfuse.example/api/public/otel/v1/traces\n"
        "  headers_env: {Authorization: OTLP_AUTH, x-unset: NOT_SET_ANYWHERE}\n"
        "  service_name: shop-bot\n"
        "  sample_ratio: 0.25\n",
        encoding="utf-8",
    )
    section = load_settings(path).telemetry
    config = section.tracing({"OTLP_AUTH": "Basic cGs6c2s="})
    assert config is not None
    assert dict(config.headers) == {"Authorization": "Basic cGs6c2s="}
    assert (config.service_name, config.sample_ratio) == ("shop-bot", 0.25)
    assert config.propagate and not config.capture_content
    path.write_text("telemetry: {service_name: x}\n", encoding="utf-8")
    assert load_settings(path).telemetry.tracing({}) is None


@pytest.fixture
def installed() -> telemetry.Tracing:
    tracing = telemetry.install(telemetry.TracingConfig(endpoint="http://unused"), MemoryExporter())
    yield tracing
    tracing.close()


def test_a_valid_traceparent_is_the_parent(installed: telemetry.Tracing) -> None:
    parent = telemetry.parent_from_traceparent(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    )
    assert parent is not None
    assert (parent.trace_id, parent.span_id) == (
        0x4BF92F3577B34DA6A3CE929D0E0E4736,
        0x00F067AA0BA902B7,
    )
    assert parent.remote and parent.sampled


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        42,
        "garbage",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + "x" * 10_000,
    ],
)
def test_a_malformed_traceparent_is_no_parent(installed: telemetry.Tracing, header: object) -> None:
    assert telemetry.parent_from_traceparent(header) is None


def test_with_tracing_off_no_exporter_runs_and_nothing_is_imported() -> None:
    code = (
        "import sys, threading\n"
        "from firstgate.runtime import load_workflow\n"
        "from firstgate.serve.api import ServiceApi\n"
        "doc = {'version': '0.1.5', 'kind': 'app', 'app': {'name': 't', 'mode': 'workflow'},\n"
        " 'workflow': {'graph': {'nodes': [{'id': 's', 'data': {'type': 'start', 'title': 'S',\n"
        " 'variables': []}}, {'id': 'e', 'data': {'type': 'end', 'title': 'E', 'outputs': []}}],\n"
        " 'edges': [{'source': 's', 'target': 'e', 'sourceHandle': 'source'}]}}}\n"
        "events = list(load_workflow(doc).run({}))\n"
        "assert events[-1].status == 'succeeded'\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry', 'prometheus',\n"
        " 'firstgate.common.otlp_encoding'))))\n"
        "print([t.name for t in threading.enumerate() if 'span-exporter' in t.name])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.split() == ["[]", "[]"]
