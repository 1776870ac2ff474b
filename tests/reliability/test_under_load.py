"""200 concurrent workflows, 10% of them on a backend that stalls.

Every stall must time out on its own budget (never early, late by less than
the budget again), and the healthy 90% must finish with their full reply.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from firstgate.plugin_daemon_client.errors import FIRST_TOKEN, FirstTokenTimeoutError
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev

from tests.fakes import llm_server as fake
from tests.reliability import support
from tests.run_events import final

WORKFLOWS = 200
STALL_EVERY = 10  # 10% stall
BUDGET_S = 2.0  # generous: the suite shares a noisy 2-core machine
TOKENS, INTERVAL_S = 5, 0.02
REPLY = "".join(f"w{i} " for i in range(TOKENS))


@pytest.mark.slow
def test_stalls_time_out_on_budget_while_the_healthy_ones_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    support.plant_secrets(monkeypatch)
    before = support.ResourceCount.now()
    flows = {
        provider: load_workflow(
            support.llm_flow(
                provider,
                first_token_ms=int(BUDGET_S * 1000),
                idle_ms=int(BUDGET_S * 1000),
                total_ms=10_000,
                retries=0,
            )
        )
        for provider in ("oa", "pd")
    }
    results: dict[int, list[ev.Event]] = {}
    crashes: list[BaseException] = []
    server_args = [
        "stall-marked",
        "--marker=STALL",
        "--stall=5",
        f"--tokens={TOKENS}",
        f"--interval={INTERVAL_S}",
    ]
    with support.capture_all_logs() as logs, fake.SubprocessServer(*server_args) as server:
        routes = support.routes(server.root_url)
        barrier = threading.Barrier(WORKFLOWS)

        def one(index: int) -> None:
            tag = f"run-{index}" + (" STALL" if index % STALL_EVERY == 0 else "")
            flow = flows["oa" if index % 2 else "pd"]
            try:
                barrier.wait(timeout=30)
                results[index] = list(flow.run({"tag": tag}, settings=routes))
            except BaseException as exc:  # noqa: BLE001 - reported below
                crashes.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(WORKFLOWS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(t.is_alive() for t in threads), "a workflow hung"
    assert not crashes, crashes[:3]
    assert len(results) == WORKFLOWS

    late: list[tuple[int, float, float]] = []
    for index, events in sorted(results.items()):
        support.check_run_shape(events)
        support.assert_events_clean(events)
        started = next(e for e in events if isinstance(e, ev.NodeStarted) and e.node_id == "llm")
        if index % STALL_EVERY == 0:
            handled: Any = next(
                e for e in events if isinstance(e, ev.NodeException) and e.node_id == "llm"
            )
            error = handled.error
            assert isinstance(error, FirstTokenTimeoutError), repr(error)
            assert error.deadline == FIRST_TOKEN
            fired_after = error.progress.elapsed_s  # from the request to the deadline firing
            seen_after = handled.elapsed - started.elapsed  # as the run's events report it
            assert fired_after >= BUDGET_S, (index, fired_after)  # never early
            late.append((index, fired_after, seen_after))
            assert isinstance(final(events), ev.WorkflowPartialSucceeded)
        else:
            errors = [
                repr(getattr(e, "error", None))
                + repr(getattr(getattr(e, "error", None), "progress", None))
                for e in events
                if getattr(e, "error", None)
            ]
            assert isinstance(final(events), ev.WorkflowSucceeded), (index, final(events), errors)
            assert final(events).outputs == {"answer": REPLY}
    assert len(late) == WORKFLOWS // STALL_EVERY
    too_late = [entry for entry in late if entry[1] >= 2 * BUDGET_S or entry[2] >= 2 * BUDGET_S]
    assert not too_late, too_late
    support.assert_no_secret(logs.lines, "a log record")
    support.assert_settles_to(before)
