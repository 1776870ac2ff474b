"""The first-token watchdog in whole workflows: the route's probe (from the
models file) is asked when the budget expires; "busy" extends the wait on the
same connection and the waiting event reaches the run's events and the CLI."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from firstgate.runtime.execution import events as ev
from firstgate.runtime.models.route_clients import RouteClients
from firstgate.runtime.models.routes import ModelRoutes
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute

from tests.fakes import llm_server as fake
from tests.fakes import probe_server as ps
from tests.integration.test_cli import firstgate, lines
from tests.integration.test_workflow_fallback import flow_doc, of, run_yaml, write_yaml
from tests.run_events import final, finished_line

CHAT = "/v1/chat/completions"
# Prompt text long enough that the estimate in the waiting message is not tiny.
QUERY = "summarise the attached report " * 40


def models(srv: ps.ProbeServer, **route: Any) -> dict[str, Any]:
    spec = {"kind": "openai-compatible", "base_url": srv.base_url, **route}
    return {"providers": {"primary": spec}}


@pytest.fixture(autouse=True)
def _no_budget_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRSTGATE_FIRST_TOKEN_TIMEOUT_S", raising=False)
    monkeypatch.delenv("FIRSTGATE_FIRST_TOKEN_CEILING_S", raising=False)


def test_busy_probe_extends_the_wait_and_the_waiting_event_reaches_the_run(
    tmp_path: Path,
) -> None:
    chat = fake.pings(0.1, 1.5, then_tokens=["finally"])
    with ps.ProbeServer(slots=ps.always_busy(), chat=chat) as srv:
        started = time.monotonic()
        events = run_yaml(
            tmp_path,
            flow_doc(),
            models(srv, first_token_timeout_s=0.4, probe="llama.cpp-slots"),
            query=QUERY,
        )
        took = time.monotonic() - started
        assert srv.count(CHAT) == 1  # the same request kept going
        probes = len(srv.probe_requests())
    waits = of(events, ev.NodeWaiting)
    assert len(waits) == probes >= 2
    first = waits[0]
    assert (first.node_id, first.attempt, first.target) == ("llm", 1, "primary")
    assert first.message_key == "watchdog.waiting"
    assert first.message.startswith("Still evaluating ~")
    (done,) = [e for e in of(events, ev.NodeSucceeded) if e.node_id == "llm"]
    tokens = done.process_data["prompt_tokens_estimate"]
    assert first.params["prompt_tokens"] == f"{tokens:,}" and tokens > 250
    assert 0.4 <= first.wait_elapsed < 1.2
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {"answer": "finally"}
    assert 1.5 <= took < 4.0


def test_idle_probe_fires_the_budget_at_the_first_window(tmp_path: Path) -> None:
    with ps.ProbeServer(slots=ps.always_idle(), chat=fake.pings(0.1, 10)) as srv:
        started = time.monotonic()
        events = run_yaml(
            tmp_path, flow_doc(), models(srv, first_token_timeout_s=0.4, probe="llama.cpp-slots")
        )
        took = time.monotonic() - started
    assert not of(events, ev.NodeWaiting)
    (handled,) = of(events, ev.NodeException)
    assert handled.error_type == "FirstTokenTimeoutError"
    assert 0.4 <= took < 2.0


def test_probe_off_never_asks(tmp_path: Path) -> None:
    with ps.ProbeServer(slots=ps.always_busy(), chat=fake.pings(0.1, 10)) as srv:
        events = run_yaml(tmp_path, flow_doc(), models(srv, first_token_timeout_s=0.3, probe="off"))
        assert srv.probe_requests() == []
    assert of(events, ev.NodeException)[0].error_type == "FirstTokenTimeoutError"


def test_cli_json_prints_the_waiting_event(tmp_path: Path) -> None:
    chat = fake.pings(0.1, 1.2, then_tokens=["late"])
    with ps.ProbeServer(slots=ps.always_busy(), chat=chat) as srv:
        flow = write_yaml(tmp_path / "flow.yml", flow_doc())
        spec = models(srv, first_token_timeout_s=0.4)  # probe: auto (the default)
        path = write_yaml(tmp_path / "models.yaml", spec)
        result = firstgate("run", str(flow), "-i", "query=hi", "--models", str(path), "--json")
    assert result.returncode == 0, result.stderr
    events = lines(result.stdout)
    waits = [e for e in events if e["event"] == "node_waiting"]
    assert waits, result.stdout
    assert waits[0]["data"]["node_id"] == "llm" and waits[0]["data"]["attempt"] == 1
    assert waits[0]["data"]["message_key"] == "watchdog.waiting"
    assert waits[0]["data"]["target"] == "primary"
    done = finished_line(events)
    assert done["data"]["status"] == "succeeded"
    assert done["data"]["outputs"] == {"answer": "late"}


def test_probe_defaults_per_route_kind_and_yaml_off() -> None:
    assert ProviderRoute(kind="openai-compatible", base_url="http://h/v1").probe_kind == "auto"
    assert ProviderRoute(kind="local").probe_kind == "auto"
    daemon = ProviderRoute(kind="plugin-daemon", base_url="http://d:5002")
    assert daemon.probe_kind == "off"
    # YAML 1.1 reads an unquoted `off` as false.
    assert ProviderRoute.model_validate({"kind": "local", "probe": False}).probe_kind == "off"


def test_route_clients_build_one_probe_per_route_on_its_own_origin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FG_TEST_KEY", "sk-route-secret")
    routes = RuntimeSettings(
        providers={
            "oa": ProviderRoute(
                kind="openai-compatible",
                base_url="http://127.0.0.1:9/v1",
                api_key_env="FG_TEST_KEY",
            ),
            "pd": ProviderRoute(kind="plugin-daemon", base_url="http://127.0.0.1:8", tenant_id="t"),
        }
    )
    clients = RouteClients(ModelRoutes(routes))
    try:
        oa = clients.plan_for("oa").primary
        assert clients.plan_for("oa").primary.probe is oa.probe  # built once
        assert oa.probe is not None and "127.0.0.1:9" in repr(oa.probe)
        assert "sk-route-secret" not in repr(oa.probe)
        assert clients.plan_for("pd").primary.probe is None
    finally:
        clients.close()


def test_probe_carries_the_key_to_its_own_origin_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FG_TEST_KEY", "sk-route-secret")
    with (
        ps.ProbeServer(slots=ps.redirect("http://127.0.0.1:1"), chat=fake.pings(0.1, 10)) as srv,
    ):
        spec = models(
            srv, first_token_timeout_s=0.3, probe="llama.cpp-slots", api_key_env="FG_TEST_KEY"
        )
        events = run_yaml(tmp_path, flow_doc(), spec)
        (probe,) = srv.probe_requests()
    assert probe.headers.get("authorization") == "Bearer sk-route-secret"
    assert of(events, ev.NodeException)[0].error_type == "FirstTokenTimeoutError"
    assert "sk-route-secret" not in repr(events)
    assert os.environ["FG_TEST_KEY"]  # unchanged
