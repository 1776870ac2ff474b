"""Whole workflows against the real llama-server (SmolLM2-135M, `--sse-ping-interval 1`).

Prompt evaluation speed depends on the machine and its load, so the long
prompt is calibrated first: it is grown until evaluating it takes several
seconds, and the short first-token budget is then a fraction of that.
Every prompt starts with a fresh nonce so llama-server's prompt cache cannot
skip the evaluation.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute

from tests.e2e.signals import default_sigint
from tests.run_events import final

ROOT = Path(__file__).resolve().parents[2]
WORDS = "river stone cloud green seven table light north paper glass field morning".split()
MIN_EVAL_S = 5.0
MAX_WORDS = 1500  # the fixture gives each of its 2 slots 2048 tokens of context


def long_text(words: int) -> str:
    rng = random.Random()
    return " ".join(rng.choice(WORDS) for _ in range(words))


def flow(
    first_token_timeout_ms: int, *, max_tokens: int = 16, stream_text: bool = False
) -> dict[str, Any]:
    # With `stream_text` the end node also shows the LLM's text first: it streams token by token.
    shown = [{"variable": "text", "value_selector": ["llm", "text"]}] if stream_text else []
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "e2e", "mode": "workflow"},
        "workflow": {
            "graph": {
                "nodes": [
                    {
                        "id": "start",
                        "data": {
                            "type": "start",
                            "title": "Start",
                            "variables": [
                                {"variable": "doc", "type": "paragraph", "required": True},
                                {"variable": "nonce", "type": "text-input", "required": True},
                            ],
                        },
                    },
                    {
                        "id": "llm",
                        "data": {
                            "type": "llm",
                            "title": "Summarize",
                            "model": {
                                "provider": "local",
                                "name": "smollm2",
                                "mode": "chat",
                                "completion_params": {"temperature": 0.0, "max_tokens": max_tokens},
                            },
                            "prompt_template": [
                                {
                                    "role": "user",
                                    "text": "{{#start.nonce#}}\n{{#start.doc#}}\nSay hello.",
                                }
                            ],
                            "invocation": {
                                "first_token_timeout_ms": first_token_timeout_ms,
                                "idle_timeout_ms": 30000,
                            },
                            "error_strategy": "fail-branch",
                        },
                    },
                    {
                        "id": "fallback",
                        "data": {
                            "type": "template-transform",
                            "title": "Fallback",
                            "template": "fallback: {{ kind }}",
                            "variables": [
                                {"variable": "kind", "value_selector": ["llm", "error_type"]}
                            ],
                        },
                    },
                    {
                        "id": "pick",
                        "data": {
                            "type": "variable-aggregator",
                            "title": "Pick",
                            "variables": [["llm", "text"], ["fallback", "output"]],
                        },
                    },
                    {
                        "id": "end",
                        "data": {
                            "type": "end",
                            "title": "End",
                            "outputs": [
                                *shown,
                                {"variable": "answer", "value_selector": ["pick", "output"]},
                            ],
                        },
                    },
                ],
                "edges": [
                    {"source": "start", "target": "llm", "sourceHandle": "source"},
                    {"source": "llm", "target": "pick", "sourceHandle": "source"},
                    {"source": "llm", "target": "fallback", "sourceHandle": "fail-branch"},
                    {"source": "fallback", "target": "pick", "sourceHandle": "source"},
                    {"source": "pick", "target": "end", "sourceHandle": "source"},
                ],
            }
        },
    }


def routes_for(server: Any, probe: str | None = None) -> RuntimeSettings:
    route = ProviderRoute(kind="openai-compatible", base_url=server.base_url, probe=probe)
    return RuntimeSettings(providers={"local": route}, default="local")


def run_flow(
    server: Any, budget_ms: int, doc: str, probe: str | None = None, **kw: Any
) -> list[ev.Event]:
    workflow = load_workflow(flow(budget_ms, **kw))
    inputs = {"doc": doc, "nonce": uuid.uuid4().hex}
    return list(workflow.run(inputs, settings=routes_for(server, probe)))


def first_token_delay(events: list[ev.Event]) -> float:
    started = next(
        e.elapsed for e in events if isinstance(e, ev.NodeStarted) and e.node_id == "llm"
    )
    first = next(e.elapsed for e in events if isinstance(e, ev.NodeFirstToken))
    return first - started


@pytest.fixture(scope="module")
def calibrated(llama_server: Any) -> tuple[str, float, list[ev.Event]]:
    """A document whose evaluation takes at least MIN_EVAL_S, and that run's events."""
    words = 600
    while True:
        doc = long_text(words)
        events = run_flow(llama_server, 300_000, doc)
        assert isinstance(final(events), ev.WorkflowSucceeded), final(events)
        ttft = first_token_delay(events)
        if ttft >= MIN_EVAL_S or words >= MAX_WORDS:
            return doc, ttft, events
        words = min(MAX_WORDS, int(words * max(1.5, MIN_EVAL_S / max(ttft, 0.1) * 1.2)))


def test_llm_node_streams_real_tokens(llama_server: Any) -> None:
    events = run_flow(llama_server, 60_000, "The sky is blue.", max_tokens=24, stream_text=True)
    chunks = [e.text for e in events if isinstance(e, ev.TextChunk) and e.source_node_id == "llm"]
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert len(chunks) >= 2
    assert done.outputs["answer"] == "".join(chunks) and done.outputs["answer"].strip()
    (llm_done,) = [e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "llm"]
    # Token by token, while the node runs: every chunk is out before its node_finished.
    assert events.index(llm_done) > max(
        i for i, e in enumerate(events) if isinstance(e, ev.TextChunk) and e.source_node_id == "llm"
    )


def test_generous_budget_succeeds_on_the_long_prompt(
    calibrated: tuple[str, float, list[ev.Event]],
) -> None:
    _, ttft, events = calibrated
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded)
    assert not done.outputs["answer"].startswith("fallback:")
    assert ttft >= 1.0  # the prompt really took a while to evaluate


def test_short_budget_fires_near_the_budget_and_takes_the_fail_branch(
    llama_server: Any, calibrated: tuple[str, float, list[ev.Event]]
) -> None:
    doc, ttft, _ = calibrated
    # Longer than the 1 s ping interval: a gate that pings could fool would never fire.
    budget_s = min(2.5, max(1.5, ttft / 3))
    # No probe: with one (the default), busy /slots would extend the wait
    # (tests/e2e/test_watchdog_e2e.py); this test is about the bare budget.
    events = run_flow(llama_server, int(budget_s * 1000), doc, probe="off")
    exc = next(e for e in events if isinstance(e, ev.NodeException))
    started = next(
        e.elapsed for e in events if isinstance(e, ev.NodeStarted) and e.node_id == "llm"
    )
    assert exc.error_type == "FirstTokenTimeoutError"
    assert exc.strategy == "fail-branch"
    fired_after = exc.elapsed - started
    # Near the budget, not at the end of the evaluation (which takes ttft seconds).
    assert budget_s <= fired_after < 2 * budget_s + 0.5
    assert fired_after < ttft
    done = final(events)
    assert isinstance(done, ev.WorkflowPartialSucceeded)
    assert done.outputs["answer"] == "fallback: FirstTokenTimeoutError"


def test_cli_abort_during_prompt_evaluation_returns_promptly(
    llama_server: Any, calibrated: tuple[str, float, list[ev.Event]], tmp_path: Path
) -> None:
    doc, ttft, _ = calibrated
    path = tmp_path / "flow.yml"
    path.write_text(yaml.safe_dump(flow(300_000)), encoding="utf-8")
    env = {**os.environ, "FIRSTGATE_LOCAL_BASE_URL": llama_server.base_url, "LANG": "C"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "firstgate.runtime.cli.command",
            "run",
            str(path),
            "--json",
            "--input",
            f"doc={doc}",
            "--input",
            f"nonce={uuid.uuid4().hex}",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_sigint,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    deadline = time.monotonic() + 30
    while not any('"node_started"' in line and '"llm"' in line for line in lines):
        assert time.monotonic() < deadline and proc.poll() is None, (lines, proc.poll())
        time.sleep(0.05)
    time.sleep(min(1.0, ttft / 3))  # now inside prompt evaluation
    interrupted = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=10)
    returned_after = time.monotonic() - interrupted
    reader.join(2)
    assert returned_after < 1.0, (returned_after, lines[-3:])
    assert proc.returncode != 0
    assert not any('"text_chunk"' in line for line in lines)
    assert '"workflow_finished"' in lines[-1] and '"stopped"' in lines[-1]  # it reported its end
    # The server stays healthy: it answers the next request.
    assert httpx.get(f"{llama_server.root_url}/health", timeout=10).status_code == 200
    events = run_flow(llama_server, 120_000, "Hi.", max_tokens=8)
    assert isinstance(final(events), ev.WorkflowSucceeded), final(events)
