"""The first-token watchdog against the real llama-server (SmolLM2-135M, 2 slots
of 2048 tokens, `--sse-ping-interval 1`, `/slots` on).

A first-token budget shorter than the prompt evaluation would fire; because the
route's probe (`auto`, the default for an openai-compatible route) finds a
slot processing in `/slots`, the gate extends the wait, the run emits a
waiting event, and the workflow succeeds with real tokens.

Machine speed: the prompt is grown until its evaluation takes a few seconds
(each run starts with a fresh nonce, so the prompt cache cannot skip the
evaluation), and the budget is a fraction of the measured time.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute

from tests.e2e.test_workflow_e2e import MAX_WORDS, first_token_delay, flow, long_text
from tests.run_events import final

MIN_EVAL_S = 3.0
CALIBRATION_BUDGET_MS = 120_000
TEST_BOUND_S = 60.0


def routes(server: Any, **route: Any) -> RuntimeSettings:
    spec = ProviderRoute(kind="openai-compatible", base_url=server.base_url, **route)
    return RuntimeSettings(providers={"local": spec}, default="local")


def run(server: Any, budget_ms: int, doc: str, **route: Any) -> list[ev.Event]:
    workflow = load_workflow(flow(budget_ms))
    inputs = {"doc": doc, "nonce": uuid.uuid4().hex}
    return list(workflow.run(inputs, settings=routes(server, **route)))


def calibrate(server: Any) -> tuple[str, float]:
    """A document whose prompt evaluation takes about MIN_EVAL_S (or the longest
    that fits a slot), and its measured time to first token."""
    words = 400
    while True:
        doc = long_text(words)
        events = run(server, CALIBRATION_BUDGET_MS, doc, probe="off")
        assert isinstance(final(events), ev.WorkflowSucceeded), final(events)
        ttft = first_token_delay(events)
        if ttft >= MIN_EVAL_S or words >= MAX_WORDS:
            return doc, ttft
        words = min(MAX_WORDS, int(words * max(1.5, MIN_EVAL_S / max(ttft, 0.1) * 1.2)))


def test_busy_slots_extend_a_short_budget_and_the_run_succeeds(llama_server: Any) -> None:
    started = time.monotonic()
    doc, ttft = calibrate(llama_server)
    if ttft < 0.6:
        pytest.skip(f"prompt evaluation too fast to undercut ({ttft:.2f} s for {MAX_WORDS} words)")
    budget_s = max(0.25, ttft / 4)
    events = run(llama_server, int(budget_s * 1000), doc)  # probe: auto (the default)
    finished = final(events)
    assert isinstance(finished, ev.WorkflowSucceeded), finished
    assert not [e for e in events if isinstance(e, ev.NodeException)]
    answer = finished.outputs["answer"]
    assert answer.strip() and not answer.startswith("fallback:")
    waits = [e for e in events if isinstance(e, ev.NodeWaiting)]
    assert waits, "the watchdog never extended the wait"
    assert waits[0].message_key == "watchdog.waiting" and waits[0].target == "local"
    assert waits[0].wait_elapsed >= budget_s
    # The first token came after the budget: without the extension the gate
    # would have fired (the same run with `probe: off` takes the fail branch,
    # tests/e2e/test_workflow_e2e.py).
    assert first_token_delay(events) > budget_s
    (done,) = [e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "llm"]
    assert done.process_data["first_token_budget"]["local"]["source"] == "node"
    assert time.monotonic() - started < TEST_BOUND_S
