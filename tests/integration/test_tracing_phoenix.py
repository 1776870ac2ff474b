"""Spans of real runs, read back from a real OTLP backend (Arize Phoenix): a
model node whose first attempt's primary stalls (the probe says idle, the gate
trips) and whose fallback answers 500, retried, swapped again and answered;
then an http-request node. The GenAI attributes, firstgate's first-token and
fallback details, and the W3C trace context sent to the model servers and the
HTTP target."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.models.breakers import reset_shared_breakers
from firstgate.runtime.settings import load_settings

from tests.connect_support import chain_flow
from tests.fakes import llm_server as fake
from tests.fakes import model_answers as ma
from tests.fakes import probe_server as ps
from tests.fakes.http_target import HttpTarget
from tests.phoenix_support import Phoenix
from tests.run_events import final

pytestmark = pytest.mark.slow
SECRET = "s3cr3t-value-for-the-trace-test"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("FIRSTGATE_FIRST_TOKEN_TIMEOUT_S", raising=False)
    monkeypatch.setenv("FIRSTGATE_ENV_API_SECRET", SECRET)
    reset_shared_breakers()
    yield
    reset_shared_breakers()


def _flow(http_url: str) -> dict[str, Any]:
    llm = {
        "model": {
            "provider": "primary",
            "name": "m",
            "mode": "chat",
            "completion_params": {"temperature": 0.2, "max_tokens": 64},
        },
        "prompt_template": [{"role": "user", "text": "{{#start.q#}} {{#env.API_SECRET#}}"}],
        "retry_config": {"retry_enabled": True, "max_retries": 1, "retry_interval": 0},
    }
    http = {"method": "get", "url": f"{http_url}/echo", "headers": "", "params": ""}
    document = chain_flow(
        [("answer", "llm", llm), ("fetch", "http-request", http)],
        {"text": ["answer", "text"], "status": ["fetch", "status_code"]},
        start_variables=[{"variable": "q", "label": "q", "type": "paragraph", "required": True}],
    )
    document["workflow"]["environment_variables"] = [
        {"name": "API_SECRET", "value_type": "secret", "value": "", "id": "API_SECRET"}
    ]
    return document


def _settings(tmp: Path, phoenix: Phoenix, primary: str, backup: str, **telemetry: Any) -> Path:
    doc = {
        "providers": {
            "primary": {
                "kind": "openai-compatible",
                "base_url": primary,
                "probe": "llama.cpp-slots",
                "fallbacks": ["backup"],
                "first_token_timeout_s": 0.3,
                "allow_same_host_fallback": True,
            },
            "backup": {"kind": "openai-compatible", "base_url": backup, "probe": "off"},
        },
        "http_request": {"allow": ["127.0.0.1"]},
        "telemetry": {
            "otlp_endpoint": phoenix.traces_endpoint,
            "service_name": "firstgate-tests",
            **telemetry,
        },
    }
    path = tmp / "settings.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _run(tmp: Path, phoenix: Phoenix, **telemetry: Any) -> dict[str, Any]:
    with (
        ps.ProbeServer(slots=ps.always_idle(), chat=ma.answer("late", delay=30)) as primary,
        fake.FakeLLMServer(ma.in_turn(fake.http_error(500), fake.tokens(["Hel", "lo"]))) as backup,
        HttpTarget() as target,
    ):
        flow_path = tmp / "flow.yml"
        flow_path.write_text(yaml.safe_dump(_flow(target.url), sort_keys=False), encoding="utf-8")
        settings = load_settings(
            _settings(tmp, phoenix, primary.base_url, backup.base_url, **telemetry)
        )
        # The run opens its own resources and closes them: its spans are flushed then.
        events = list(load_workflow(flow_path).run({"q": "hello?"}, settings=settings))
        return {
            "events": events,
            "primary": [r for r in primary.requests if r.method == "POST"],
            "backup": [r for r in backup.requests if r.method == "POST"],
            "target": list(target.requests),
        }


def _by_id(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["context"]["span_id"]: s for s in spans}


def _children(spans: list[dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    kids = [s for s in spans if s["parent_id"] == parent["context"]["span_id"]]
    return sorted(kids, key=lambda s: s["start_time"])


def _events(span: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [e for e in span["events"] if e["name"] == name]


def _traceparent(headers: dict[str, str]) -> tuple[str, str]:
    lowered = {k.lower(): v for k, v in headers.items()}
    version, trace_id, span_id, flags = lowered["traceparent"].split("-")
    assert version == "00" and int(flags, 16) & 1  # sampled
    return trace_id, span_id


def test_a_run_with_a_retry_and_a_fallback_is_read_back_from_phoenix(
    phoenix: Phoenix, tmp_path: Path
) -> None:
    run = _run(tmp_path, phoenix)
    events = run["events"]
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {"text": "Hello", "status": 200}
    assert len(run["primary"]) == 2 and len(run["backup"]) == 2
    run_id = done.run.workflow_run_id

    (root,) = phoenix.find(lambda s: s["attributes"].get("firstgate.run.id") == run_id)
    trace_id = root["context"]["trace_id"]
    spans = phoenix.trace(trace_id, at_least=10)
    assert root["parent_id"] is None
    assert root["attributes"]["firstgate.run.status"] == "succeeded"
    assert root["attributes"]["firstgate.app.mode"] == "workflow"

    nodes = {s["attributes"]["firstgate.node.id"]: s for s in _children(spans, root)}
    assert set(nodes) == {"start", "answer", "fetch", "end"}
    answer = nodes["answer"]
    assert answer["attributes"]["firstgate.node.type"] == "llm"
    assert answer["attributes"]["firstgate.node.attempts"] == 2
    assert answer["attributes"]["firstgate.node.status"] == "succeeded"
    (retry,) = _events(answer, "firstgate.retry")
    assert retry["attributes"]["error.type"] == "FallbackExhaustedError"
    swaps = _events(answer, "firstgate.fallback.swap")
    assert [e["attributes"]["firstgate.fallback.reason"] for e in swaps] == [
        "FirstTokenTimeoutError",
        "FirstTokenTimeoutError",
    ]
    assert all(e["attributes"]["firstgate.route"] == "backup" for e in swaps)
    assert _events(answer, "firstgate.fallback.cap"), "the chain's per-attempt caps"
    (first,) = _events(answer, "firstgate.first_token")
    assert first["attributes"]["firstgate.route"] == "backup"
    assert first["attributes"]["firstgate.attempt"] == 2

    # One span per target attempt, under the node: primary, backup, primary, backup.
    calls = _children(spans, answer)
    assert [c["attributes"]["firstgate.route"] for c in calls] == [
        "primary",
        "backup",
        "primary",
        "backup",
    ]
    for call in calls:
        attributes = call["attributes"]
        assert call["name"] == "chat m"
        assert call["span_kind"] == "LLM"
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.request.model"] == "m"
        assert attributes["gen_ai.request.temperature"] == 0.2
        assert attributes["gen_ai.request.max_tokens"] == 64
        assert attributes["server.address"] == "127.0.0.1"
    for stalled in (calls[0], calls[2]):
        attributes = stalled["attributes"]
        assert attributes["error.type"] == "FirstTokenTimeoutError"
        assert attributes["firstgate.gate.cause"] == "first_token"
        assert attributes["firstgate.first_token.budget_s"] == 0.3
        assert attributes["firstgate.first_token.budget_source"] == "route"
        assert stalled["status_code"] == "ERROR"
        verdicts = [
            e["attributes"]["firstgate.probe.verdict"] for e in _events(stalled, "firstgate.probe")
        ]
        assert verdicts == ["idle"]
        (trip,) = _events(stalled, "firstgate.gate.trip")
        assert trip["attributes"]["firstgate.gate.cause"] == "first_token"
        assert "firstgate.fallback.cap_s" in attributes
    assert calls[1]["attributes"]["error.type"] == "InvokeServerError"
    answered = calls[3]["attributes"]
    assert "error.type" not in answered
    assert answered["gen_ai.response.model"] == "m"
    assert answered["gen_ai.usage.input_tokens"] == 5
    assert answered["gen_ai.usage.output_tokens"] == 2
    assert answered["gen_ai.response.finish_reasons"] == ["stop"]
    assert answered["firstgate.ttft_s"] > 0
    assert _events(calls[3], "firstgate.first_token")

    # The model servers were sent the trace context of the attempt's own span.
    sent = [_traceparent(r.headers) for r in (*run["primary"], *run["backup"])]
    order = [run["primary"][0], run["backup"][0], run["primary"][1], run["backup"][1]]
    assert [_traceparent(r.headers) for r in order] == [
        (trace_id, c["context"]["span_id"]) for c in calls
    ]
    assert len(set(sent)) == 4

    # The http-request node's call is a client span, and the target got its context.
    (http_call,) = _children(spans, nodes["fetch"])
    assert http_call["name"] == "HTTP GET"
    assert http_call["attributes"]["http.response.status_code"] == 200
    (request,) = run["target"]
    assert _traceparent(request["headers"]) == (trace_id, http_call["context"]["span_id"])

    # No content without capture_content, and never a secret.
    assert not any("input.value" in s["attributes"] for s in spans)
    assert SECRET not in json.dumps(spans)


def test_capture_content_records_redacted_inputs_and_outputs_and_propagate_off_sends_nothing(
    phoenix: Phoenix, tmp_path: Path
) -> None:
    run = _run(tmp_path, phoenix, capture_content=True, propagate=False)
    done = final(run["events"])
    assert isinstance(done, ev.WorkflowSucceeded), done
    (root,) = phoenix.find(
        lambda s: s["attributes"].get("firstgate.run.id") == done.run.workflow_run_id
    )
    spans = phoenix.trace(root["context"]["trace_id"], at_least=10)
    answer = next(s for s in spans if s["attributes"].get("firstgate.node.id") == "answer")
    assert json.loads(answer["attributes"]["output.value"])["text"] == "Hello"
    assert json.loads(root["attributes"]["output.value"]) == {"text": "Hello", "status": 200}
    # The prompt went to the model with the secret in it; no span shows it.
    assert SECRET in run["backup"][-1].body.decode()
    assert SECRET not in json.dumps(spans)
    for request in (*run["primary"], *run["backup"]):
        assert "traceparent" not in {k.lower() for k in request.headers}
    assert "traceparent" not in {k.lower() for k in run["target"][0]["headers"]}
