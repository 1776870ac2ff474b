"""Fallback chains in whole workflows: a YAML flow and a YAML models file, real
sockets (the raw-socket fake model servers), the real engine and CLI.

Chat requests are counted by path: a route's liveness probe (default `auto`)
may also knock on a fake server, and those GETs are not attempts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.models.breakers import reset_shared_breakers
from firstgate.runtime.settings import load_settings

from tests.fakes import llm_server as fake
from tests.integration.test_cli import firstgate, lines
from tests.run_events import final

CHAT = "/v1/chat/completions"


@pytest.fixture(autouse=True)
def _fresh_breakers() -> Iterator[None]:
    # Breakers are shared by the process; a test must not inherit another's.
    reset_shared_breakers()
    yield
    reset_shared_breakers()


def chats(server: Any) -> int:
    return sum(1 for r in server.requests if r.method == "POST" and r.path == CHAT)


def flow_doc(**llm_extra: Any) -> dict[str, Any]:
    """start -> llm -> answer, and llm -(fail-branch)-> sorry."""
    llm: dict[str, Any] = {
        "type": "llm",
        "title": "Ask",
        "model": {"provider": "primary", "name": "m", "mode": "chat"},
        "prompt_template": [{"role": "user", "text": "{{#sys.query#}}"}],
        "error_strategy": "fail-branch",
    }
    llm.update(llm_extra)
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "fallback", "mode": "advanced-chat"},
        "workflow": {
            "graph": {
                "nodes": [
                    {"id": "start", "data": {"type": "start", "title": "Start"}},
                    {"id": "llm", "data": llm},
                    {"id": "ans", "data": {"type": "answer", "answer": "{{#llm.text#}}"}},
                    {"id": "sorry", "data": {"type": "answer", "answer": "{{#llm.error_type#}}"}},
                ],
                "edges": [
                    {"source": "start", "target": "llm", "sourceHandle": "source"},
                    {"source": "llm", "target": "ans", "sourceHandle": "source"},
                    {"source": "llm", "target": "sorry", "sourceHandle": "fail-branch"},
                ],
            }
        },
    }


def write_yaml(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def models_doc(
    primary: Any, backup: Any, *, primary_extra: Any = None, backup_extra: Any = None, **top: Any
) -> dict[str, Any]:
    return {
        "providers": {
            "primary": {
                "kind": "openai-compatible",
                "base_url": primary.base_url,
                "fallbacks": ["backup"],
                **(primary_extra or {}),
            },
            "backup": {
                "kind": "openai-compatible",
                "base_url": backup.base_url,
                **(backup_extra or {}),
            },
        },
        **top,
    }


def run_yaml(
    tmp_path: Path, flow: dict[str, Any], models: dict[str, Any], query: str = "hi"
) -> list[ev.Event]:
    workflow = load_workflow(write_yaml(tmp_path / "flow.yml", flow))
    routes = load_settings(write_yaml(tmp_path / "models.yaml", models))
    return list(workflow.run({"query": query}, settings=routes))


def of(events: list[ev.Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def kinds(events: list[ev.Event]) -> list[tuple[str, str | None]]:
    return [(e.kind, e.target) for e in of(events, ev.NodeFallback)]


def test_stalled_primary_swaps_to_the_fallback_whose_text_is_the_output(tmp_path: Path) -> None:
    with (
        fake.FakeLLMServer(fake.pings(0.05, duration=30)) as primary,
        fake.FakeLLMServer(fake.tokens(["from ", "backup"])) as backup,
    ):
        started = time.monotonic()
        events = run_yaml(
            tmp_path,
            flow_doc(),
            models_doc(primary, backup, primary_extra={"first_token_timeout_s": 0.4}),
        )
        took = time.monotonic() - started
        assert (chats(primary), chats(backup)) == (1, 1)
    assert kinds(events) == [("cap", "primary"), ("swap", "backup"), ("cap", "backup")]
    swap = of(events, ev.NodeFallback)[1]
    assert swap.reason == "FirstTokenTimeoutError"  # the swap says why
    assert swap.message == "primary failed (FirstTokenTimeoutError); switching to backup."
    assert swap.message_key == "watchdog.fallback.swap" and swap.attempt == 1
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {"answer": "from backup"}
    (succeeded,) = [e for e in of(events, ev.NodeSucceeded) if e.node_id == "llm"]
    assert succeeded.process_data["route"] == "backup"
    assert succeeded.process_data["fallback_failures"] == [
        {"target": "primary", "error_type": "FirstTokenTimeoutError"}
    ]
    # The first-token events and the streamed text say which target produced them.
    assert {c.target for c in of(events, ev.NodeFirstToken)} == {"backup"}
    assert {a.target for a in of(events, ev.TextChunk) if a.source_node_id == "llm"} == {"backup"}
    assert 0.4 <= took < 3.0


def test_chunks_of_a_failed_target_are_marked_and_superseded(tmp_path: Path) -> None:
    """The primary streams two tokens and goes quiet; its chunks carry its name,
    come before the swap, and are not part of the answer."""
    with (
        fake.FakeLLMServer(fake.stall_after(2, seconds=30)) as primary,
        fake.FakeLLMServer(fake.tokens(["clean"])) as backup,
    ):
        flow = flow_doc(invocation={"idle_timeout_ms": 300})
        events = run_yaml(tmp_path, flow, models_doc(primary, backup))
    swap_at = events.index(next(e for e in of(events, ev.NodeFallback) if e.kind == "swap"))
    before = [e for e in events[:swap_at] if isinstance(e, ev.TextChunk) and e.source_node_id]
    after = [e for e in events[swap_at:] if isinstance(e, ev.TextChunk) and e.source_node_id]
    assert [(c.target, c.text) for c in before] == [("primary", "t0 "), ("primary", "t1 ")]
    assert [(c.target, c.text) for c in after] == [("backup", "clean")]
    assert of(events, ev.NodeFallback)[1].reason == "IdleTimeoutError"
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded)
    assert done.outputs == {"answer": "clean"}
    (succeeded,) = [e for e in of(events, ev.NodeSucceeded) if e.node_id == "llm"]
    assert succeeded.outputs["text"] == "clean"


def test_a_bad_request_on_the_primary_does_not_swap(tmp_path: Path) -> None:
    with (
        fake.FakeLLMServer(fake.http_error(400, {"error": {"message": "bad"}})) as primary,
        fake.FakeLLMServer(fake.tokens(["never"])) as backup,
    ):
        events = run_yaml(tmp_path, flow_doc(), models_doc(primary, backup))
        assert (chats(primary), chats(backup)) == (1, 0)
    assert kinds(events) == [("cap", "primary")]
    (handled,) = of(events, ev.NodeException)
    assert handled.error_type == "BadRequestError"
    assert final(events).outputs == {"answer": "BadRequestError"}


def test_retry_walks_the_whole_chain_again(tmp_path: Path) -> None:
    """Two retries: the chain is walked three times; both servers see three requests."""
    retry = {"retry_enabled": True, "max_retries": 2, "retry_interval": 50}
    with (
        fake.FakeLLMServer(fake.headers_then_silence(30)) as primary,
        fake.FakeLLMServer(
            [fake.close_before_token(), fake.close_before_token(), fake.tokens(["third"])]
        ) as backup,
    ):
        models = models_doc(
            primary,
            backup,
            primary_extra={
                "first_token_timeout_s": 0.3,
                # A key naming no target: one config warning per run, not per walk.
                "swap_attempt_timeout_ms_by_target": {"nobody": 100},
            },
        )
        events = run_yaml(tmp_path, flow_doc(retry_config=retry), models)
        assert (chats(primary), chats(backup)) == (3, 3)
    retries = of(events, ev.NodeRetry)
    assert [r.attempt for r in retries] == [1, 2]
    assert {r.error_type for r in retries} == {"FallbackExhaustedError"}
    swaps = [(e.attempt, e.reason) for e in of(events, ev.NodeFallback) if e.kind == "swap"]
    assert swaps == [(n, "FirstTokenTimeoutError") for n in (1, 2, 3)]
    warnings = [e for e in of(events, ev.NodeFallback) if e.kind == "config_warning"]
    assert [(w.reason, w.target) for w in warnings] == [("unknown_target", "nobody")]
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {"answer": "third"}
    (succeeded,) = [e for e in of(events, ev.NodeSucceeded) if e.node_id == "llm"]
    assert succeeded.attempt == 3 and succeeded.process_data["route"] == "backup"


def test_total_budget_stop_is_an_event_and_the_fallback_is_not_started(tmp_path: Path) -> None:
    with (
        fake.FakeLLMServer(fake.headers_then_silence(30)) as primary,
        fake.FakeLLMServer(fake.tokens(["never"])) as backup,
    ):
        models = models_doc(
            primary,
            backup,
            primary_extra={"first_token_timeout_s": 10, "swap_total_budget_ms": 600},
        )
        started = time.monotonic()
        events = run_yaml(tmp_path, flow_doc(), models)
        took = time.monotonic() - started
        assert (chats(primary), chats(backup)) == (1, 0)
    fallback = of(events, ev.NodeFallback)
    assert [(e.kind, e.reason) for e in fallback] == [
        ("cap", "budget"),
        ("cap_fired", "attempt_cap"),
        ("budget_stop", "budget_floor"),
    ]
    stop = fallback[-1]
    assert stop.target == "backup" and stop.params["budget"] == "600"
    (handled,) = of(events, ev.NodeException)
    assert handled.error_type == "FallbackBudgetError"
    assert 0.6 <= took < 3.0


def test_abort_during_a_fallback_attempt_cancels_it_within_a_second(tmp_path: Path) -> None:
    retry = {"retry_enabled": True, "max_retries": 2, "retry_interval": 50}
    with (
        fake.FakeLLMServer(fake.http_error(503)) as primary,
        fake.FakeLLMServer(fake.headers_then_silence(30)) as backup,
    ):
        workflow = load_workflow(write_yaml(tmp_path / "flow.yml", flow_doc(retry_config=retry)))
        routes = load_settings(write_yaml(tmp_path / "models.yaml", models_doc(primary, backup)))
        run = workflow.run({"query": "hi"}, settings=routes)
        events: list[ev.Event] = []
        aborted_at: list[float] = []

        def abort() -> None:
            aborted_at.append(time.monotonic())
            run.abort("test abort")

        for event in run:
            events.append(event)
            if isinstance(event, ev.NodeFallback) and event.kind == "swap":
                threading.Timer(0.3, abort).start()
        after_abort = time.monotonic() - aborted_at[0]
        # The backup attempt was in flight when the abort came.
        assert (chats(primary), chats(backup)) == (1, 1)
    assert after_abort < 1.0
    (stopped,) = [e for e in of(events, ev.NodeStopped) if e.node_id == "llm"]
    assert stopped.error_type == "StreamCancelledError"
    assert not of(events, ev.NodeRetry)  # an abort is not retried
    assert isinstance(final(events), ev.WorkflowStopped)


def test_breaker_opens_across_runs_and_its_skip_is_an_event(tmp_path: Path) -> None:
    """Breakers are shared by the process: two runs in which the primary times
    out open it (threshold 2); the third run skips the primary without a request."""
    with (
        fake.FakeLLMServer(fake.headers_then_silence(30)) as primary,
        fake.FakeLLMServer(fake.tokens(["ok"])) as backup,
    ):
        models = models_doc(
            primary,
            backup,
            primary_extra={"first_token_timeout_s": 0.2},
            breaker={"threshold": 2, "cooldown_s": 60},
        )
        first = run_yaml(tmp_path, flow_doc(), models)
        second = run_yaml(tmp_path, flow_doc(), models)
        assert chats(primary) == 2
        third = run_yaml(tmp_path, flow_doc(), models)
        assert chats(primary) == 2 and chats(backup) == 3
    for events in (first, second):
        assert ("swap", "backup") in kinds(events)
    assert kinds(third) == [("breaker_skip", "primary"), ("cap", "backup")]
    skip = of(third, ev.NodeFallback)[0]
    assert skip.reason == "breaker_open" and skip.params["failures"] == 2
    assert final(third).outputs == {"answer": "ok"}


def test_same_busy_local_host_is_skipped_unless_allowed(tmp_path: Path) -> None:
    """Two routes on one loopback origin: after the first times out there, the
    second would queue behind it, so it is skipped unless it opts in."""

    def models(server: fake.FakeLLMServer, allow: bool) -> dict[str, Any]:
        return models_doc(
            server,
            server,
            primary_extra={"first_token_timeout_s": 0.3, "probe": "off"},
            backup_extra={"probe": "off", "allow_same_host_fallback": allow},
        )

    scenarios = [fake.headers_then_silence(30), fake.tokens(["same host"])]
    with fake.FakeLLMServer(scenarios) as server:
        skipped = run_yaml(tmp_path, flow_doc(), models(server, allow=False))
        assert chats(server) == 1
    assert [k for k, _ in kinds(skipped)] == ["cap", "same_host_skip"]
    assert of(skipped, ev.NodeFallback)[1].reason == "same_host_busy"
    assert of(skipped, ev.NodeException)[0].error_type == "FallbackExhaustedError"
    with fake.FakeLLMServer(scenarios) as server:
        allowed = run_yaml(tmp_path, flow_doc(), models(server, allow=True))
        assert chats(server) == 2
    assert final(allowed).outputs == {"answer": "same host"}


def test_cli_prints_fallback_events_in_json_and_as_notes(tmp_path: Path) -> None:
    with (
        fake.FakeLLMServer(fake.headers_then_silence(30)) as primary,
        fake.FakeLLMServer(fake.tokens(["rescued"])) as backup,
    ):
        flow = write_yaml(tmp_path / "flow.yml", flow_doc())
        models = write_yaml(
            tmp_path / "models.yaml",
            models_doc(primary, backup, primary_extra={"first_token_timeout_s": 0.3}),
        )
        as_json = firstgate("run", str(flow), "-i", "query=hi", "--models", str(models), "--json")
        human = firstgate("run", str(flow), "-i", "query=hi", "--models", str(models))
    assert as_json.returncode == 0, as_json.stderr
    swaps = [e for e in lines(as_json.stdout) if e["event"] == "node_fallback"]
    assert [(e["data"]["kind"], e["data"]["target"]) for e in swaps] == [
        ("cap", "primary"),
        ("swap", "backup"),
        ("cap", "backup"),
    ]
    swap = swaps[1]
    assert swap["data"]["node_id"] == "llm" and swap["data"]["attempt"] == 1
    assert swap["data"]["reason"] == "FirstTokenTimeoutError"
    assert swap["data"]["message_key"] == "watchdog.fallback.swap"
    assert swap["data"]["params"] == {
        "failed": "primary",
        "error_type": "FirstTokenTimeoutError",
        "target": "backup",
    }
    assert human.returncode == 0, human.stderr
    assert "Ask: primary failed (FirstTokenTimeoutError); switching to backup." in human.stderr
    assert "Trying" not in human.stderr  # the routine cap line stays in --json
    assert "rescued" in human.stdout


def test_buffered_answer_text_of_a_failed_target_is_never_streamed(tmp_path: Path) -> None:
    """The answer waits for a slower node first, so the LLM's chunks are buffered;
    the swap drops the failed target's buffer and only the backup's text streams."""
    flow = flow_doc(invocation={"idle_timeout_ms": 300})
    graph = flow["workflow"]["graph"]
    slow = {
        "type": "llm",
        "title": "Slow",
        "model": {"provider": "slow", "name": "m", "mode": "chat"},
        "prompt_template": [{"role": "user", "text": "x"}],
    }
    graph["nodes"].append({"id": "slow", "data": slow})
    graph["nodes"][2]["data"]["answer"] = "{{#slow.text#}}|{{#llm.text#}}"
    graph["edges"] += [
        {"source": "start", "target": "slow", "sourceHandle": "source"},
        {"source": "slow", "target": "ans", "sourceHandle": "source"},
    ]
    with (
        fake.FakeLLMServer(fake.stall_after(2, seconds=30)) as primary,
        # The backup is still streaming when the slow node finishes, so the
        # answer flushes the LLM's buffer and then streams it live.
        fake.FakeLLMServer(
            fake.withhold_headers(0.6, fake.tokens(["c1", "c2"], interval=0.1))
        ) as backup,
        fake.FakeLLMServer(fake.tokens(["s1", "s2"], interval=0.4)) as slow_server,
    ):
        models = models_doc(primary, backup)
        models["providers"]["slow"] = {
            "kind": "openai-compatible",
            "base_url": slow_server.base_url,
        }
        events = run_yaml(tmp_path, flow, models)
    assert ("swap", "backup") in kinds(events)
    streamed = "".join(e.text for e in of(events, ev.TextChunk) if e.node_id == "ans")
    assert streamed == "s1s2|c1c2"
    assert final(events).outputs == {"answer": "s1s2|c1c2"}
    live = [e for e in of(events, ev.TextChunk) if e.source_node_id == "llm"]
    assert live and {e.target for e in live} == {"backup"}
