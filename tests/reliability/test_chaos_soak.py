"""Chaos soak: hundreds of workflow runs against a seeded hostile backend.

Each run sends a unique tag in its prompt; the fake server groups requests by
tag and draws, per attempt, one hostile behaviour (withheld headers, pings,
stalls, resets, trickles, malformed or oversized frames, 429/500/503 with and
without Retry-After, credential echoes). The draw is reproducible from the
seed, so every run's events can be checked against what the server did.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from firstgate.plugin_daemon_client.errors import (
    FIRST_TOKEN,
    IDLE,
    STREAM_TOTAL,
    FirstGateError,
    InvokeError,
    StreamTimeoutError,
)
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev

from tests.fakes import llm_server as fake
from tests.reliability import support
from tests.run_events import final

RUNS = 320
PARALLEL = 24
SEED = 20240607
# Budgets leave a healthy reply room on a shared, loaded 2-core machine (24
# parallel clients against one server process); the hostile kinds still trip them.
FIRST_TOKEN_S, IDLE_S, TOTAL_S = 0.5, 0.5, 2.0
STALL_S = 2.5  # > every budget: a stalling backend is always outlasted by the gate
BUDGET_OF = {FIRST_TOKEN: FIRST_TOKEN_S, IDLE: IDLE_S, STREAM_TOTAL: TOTAL_S}
DEADLINE_OF = {
    "FirstTokenTimeoutError": FIRST_TOKEN,
    "IdleTimeoutError": IDLE,
    "StreamTotalTimeoutError": STREAM_TOTAL,
}
RETRY_AFTER_OF = {"http_429_retry_after": 1.0, "http_429": None, "http_503_retry_after": 2.0}
TEXT_OF = {"ok": "abc", "ok_after_pings": "pq"}
OK_WEIGHT = 4.0


def expected_picks(chaos: fake.Chaos, tag: str) -> list[str]:
    """What the server served this run: one attempt, and a retry if it failed."""
    first = chaos.draw(tag, 0)
    if fake.CHAOS_EXPECTED[first] is None:
        return [first]
    return [first, chaos.draw(tag, 1)]


def check_error(error: BaseException, kind: str) -> None:
    """The error a run reported for one attempt fits what the server did."""
    expected = fake.CHAOS_EXPECTED[kind]
    assert isinstance(error, FirstGateError), (kind, repr(error))
    assert type(error).__name__ == expected, (kind, repr(error))
    if isinstance(error, StreamTimeoutError):
        deadline = DEADLINE_OF[expected]
        assert error.deadline == deadline, (kind, error.deadline)
        budget = BUDGET_OF[deadline]
        elapsed = error.progress.elapsed_s
        # Never early, and well before twice the budget (plus scheduling slack for
        # 24 parallel runs on 2 cores).
        assert budget - 0.005 <= elapsed < 2 * budget + 0.25, (kind, elapsed, error.progress)
        if kind == "withhold_headers":
            assert not error.progress.headers_received
        elif kind in ("headers_then_silence", "pings_forever", "role_then_stall"):
            assert error.progress.headers_received and error.progress.tokens == 0
        elif kind == "stall_mid_reply":
            assert error.progress.partial_text == "t0 t1 "
    if kind in RETRY_AFTER_OF:
        assert isinstance(error, InvokeError)
        assert error.retry_after_s == RETRY_AFTER_OF[kind], (kind, error.retry_after_s)


def check_run(events: list[ev.Event], picks: list[str]) -> None:
    support.check_run_shape(events)
    assert 1 <= len(picks) <= 2, picks
    retries = [e for e in events if isinstance(e, ev.NodeRetry) and e.node_id == "llm"]
    assert len(retries) == len(picks) - 1, (picks, retries)
    for retry, kind in zip(retries, picks, strict=False):
        assert retry.error is not None
        check_error(retry.error, kind)
    last = picks[-1]
    terminal = final(events)
    if fake.CHAOS_EXPECTED[last] is None:
        succeeded = [e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "llm"]
        assert len(succeeded) == 1, [
            repr(e) for e in events if getattr(e, "node_id", None) == "llm"
        ]
        done = succeeded[0]
        assert done.attempt == len(picks)
        assert done.outputs["text"] == TEXT_OF[last]
        assert isinstance(terminal, ev.WorkflowSucceeded), terminal
        assert terminal.outputs == {"answer": TEXT_OF[last]}
    else:
        handled_events = [
            e for e in events if isinstance(e, ev.NodeException) and e.node_id == "llm"
        ]
        assert len(handled_events) == 1, [type(e).__name__ for e in events]
        handled = handled_events[0]
        assert handled.error is not None
        check_error(handled.error, last)
        assert handled.outputs["error_type"] == fake.CHAOS_EXPECTED[last]
        assert isinstance(terminal, ev.WorkflowPartialSucceeded), terminal
        assert terminal.outputs == {"answer": f"failed: {fake.CHAOS_EXPECTED[last]}"}


@pytest.mark.slow
def test_chaos_soak(monkeypatch: pytest.MonkeyPatch) -> None:
    support.plant_secrets(monkeypatch)
    before = support.ResourceCount.now()
    # The server runs in its own process: in-process, it would compete with 24
    # clients for the GIL and a healthy reply could look like a stall.
    chaos = fake.chaos_from_args(SEED, OK_WEIGHT, STALL_S, r"run-\d+")
    server_args = ["chaos", f"--seed={SEED}", f"--ok-weight={OK_WEIGHT}", f"--stall={STALL_S}"]
    results: dict[str, list[ev.Event]] = {}
    with support.capture_all_logs() as logs, fake.SubprocessServer(*server_args) as server:
        routes = support.routes(server.root_url)
        flows = {
            provider: load_workflow(
                support.llm_flow(
                    provider,
                    first_token_ms=int(FIRST_TOKEN_S * 1000),
                    idle_ms=int(IDLE_S * 1000),
                    total_ms=int(TOTAL_S * 1000),
                )
            )
            for provider in ("oa", "pd")
        }

        def one(index: int) -> tuple[str, list[ev.Event]]:
            tag = f"run-{index}"
            flow = flows["oa" if index % 2 else "pd"]
            return tag, list(flow.run({"tag": tag}, settings=routes))

        with ThreadPoolExecutor(PARALLEL) as pool:
            for tag, events in pool.map(one, range(RUNS)):
                results[tag] = events
    assert len(results) == RUNS
    served: dict[str, int] = {}
    for tag, events in results.items():
        picks = expected_picks(chaos, tag)
        for kind in picks:
            served[kind] = served.get(kind, 0) + 1
        try:
            check_run(events, picks)
        except AssertionError as failure:
            names = [type(e).__name__ for e in events]
            raise AssertionError(f"{tag}: picks={picks} events={names}: {failure}") from None
        support.assert_events_clean(events)
    # The soak really exercised every hostile behaviour.
    assert set(served) == set(fake.CHAOS_KINDS), sorted(set(fake.CHAOS_KINDS) - set(served))
    support.assert_no_secret(logs.lines, "a log record")
    support.assert_settles_to(before)


def test_the_planted_key_really_reaches_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """The secret checks above mean something only if the key is sent and echoed."""
    support.plant_secrets(monkeypatch)
    with fake.FakeLLMServer(fake.chaos_scenario("echo_credentials_401")) as server:
        routes = support.routes(server.root_url)
        for provider in ("oa", "pd"):
            flow = load_workflow(
                support.llm_flow(provider, first_token_ms=300, idle_ms=300, total_ms=1000)
            )
            events: list[Any] = list(flow.run({"tag": "run-x"}, settings=routes))
            support.check_run_shape(events)
            support.assert_events_clean(events)
        sent = [
            r.headers.get("authorization", "") + r.headers.get("x-api-key", "")
            for r in server.requests
        ]
        assert any(support.OPENAI_SECRET in s for s in sent)
        assert any(support.DAEMON_SECRET in s for s in sent)
