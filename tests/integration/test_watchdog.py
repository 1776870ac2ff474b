"""The first-token watchdog with real probes against a real-socket server that
serves the chat stream and the status endpoints on one origin.

Generous timing bounds only: a deadline fires after its budget and well
before twice it (plus the probe time where a probe is slow).
"""

from __future__ import annotations

import re
import time

import pytest
from firstgate.plugin_daemon_client import LLMClient, WaitInfo, first_token_gate
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.probes import make_probe

from tests.fakes import llm_server as fake
from tests.fakes import probe_server as ps

WINDOW = 0.4
PROBE_TIMEOUT = 0.3
MESSAGES = [{"role": "user", "content": "summarise the attached report"}]


def collect(client: LLMClient) -> str:
    return "".join(chunk.text for chunk in client.invoke_llm("m", MESSAGES))


def run(
    srv: ps.ProbeServer, kind: str | None, **gate: object
) -> tuple[str | E.FirstGateError, float, list[WaitInfo], object]:
    waits: list[WaitInfo] = []
    probe = make_probe(kind, srv.base_url, timeout=PROBE_TIMEOUT) if kind else None
    client = LLMClient("openai-compatible", srv.base_url)
    start = time.monotonic()
    outcome: str | E.FirstGateError
    with first_token_gate(probe=probe, on_wait=waits.append, **gate) as g:  # type: ignore[arg-type]
        try:
            outcome = collect(client)
        except E.FirstGateError as exc:
            outcome = exc
    client.close()
    return outcome, time.monotonic() - start, waits, g


def test_busy_server_is_waited_for_and_the_wait_is_surfaced() -> None:
    with ps.ProbeServer(
        slots=ps.always_busy(), chat=fake.pings(0.1, 1.5, then_tokens=["finally"])
    ) as srv:
        outcome, took, waits, gate = run(
            srv, "llama.cpp-slots", first_token_timeout=WINDOW, prompt_tokens=90_700
        )
        probes = len(srv.probe_requests())
        chats = srv.count("/v1/chat/completions")
    assert outcome == "finally"
    assert chats == 1  # the same request kept going: no lost prefill
    assert gate.extensions == len(waits) == probes >= 3  # type: ignore[attr-defined]
    assert probes <= took / WINDOW + 1  # never more than one probe per window
    pattern = (
        r"Still evaluating ~90,700 prompt tokens \((\d+) s elapsed\); "
        r"the server reports it is working — waiting\."
    )
    match = re.fullmatch(pattern, waits[0].message)
    assert match, waits[0].message
    assert waits[0].extensions == 1 and waits[-1].extensions == len(waits)
    assert [w.elapsed_s for w in waits] == sorted(w.elapsed_s for w in waits)
    assert WINDOW <= waits[0].elapsed_s < 2 * WINDOW


def test_one_probe_request_per_expired_window() -> None:
    with ps.ProbeServer(metrics=ps.always_busy(), chat=fake.pings(0.05, 10)) as srv:
        outcome, took, waits, _ = run(
            srv, "llama.cpp-metrics", first_token_timeout=0.25, ceiling=1.6
        )
        probes = len(srv.probe_requests())
    assert isinstance(outcome, E.FirstTokenTimeoutError) and outcome.deadline == "ceiling"
    # Each window starts when the busy answer arrives, so at most ceil(1.6 / 0.25)
    # windows fit before the ceiling; the pings every 50 ms never trigger a probe.
    assert probes == len(waits)
    assert 4 <= probes <= 7
    assert 1.6 <= took < 2.5


def test_ceiling_stops_a_server_that_always_claims_busy() -> None:
    with ps.ProbeServer(gate=ps.always_busy(), chat=fake.pings(0.1, 10)) as srv:
        outcome, took, waits, _ = run(srv, "gate", first_token_timeout=0.3, ceiling=1.0)
    assert isinstance(outcome, E.FirstTokenTimeoutError)
    assert outcome.deadline == "ceiling"
    assert "FIRSTGATE_FIRST_TOKEN_CEILING_S" in str(outcome) and "kept reporting busy" in str(
        outcome
    )
    assert 1.0 <= took < 2.0 and len(waits) >= 2


def test_busy_then_idle_fires_the_first_token_deadline_not_the_ceiling() -> None:
    with ps.ProbeServer(slots=ps.busy_then_idle(2), chat=fake.pings(0.1, 10)) as srv:
        outcome, took, waits, _ = run(srv, "llama.cpp-slots", first_token_timeout=0.3)
        probes = len(srv.probe_requests())
    assert isinstance(outcome, E.FirstTokenTimeoutError) and outcome.deadline == "first_token"
    assert len(waits) == 2 and probes == 3
    assert 0.9 <= took < 1.8


NO_SIGNAL = [ps.erroring(), ps.malformed(), ps.missing(), ps.slow(3.0)]


@pytest.mark.parametrize("behaviour", NO_SIGNAL, ids=["500", "malformed", "404", "slow"])
@pytest.mark.parametrize("kind", ["auto", "llama.cpp-slots", "vllm", "gate"])
def test_no_signal_behaves_exactly_like_no_probe(kind: str, behaviour: ps.Behaviour) -> None:
    chat = fake.pings(0.1, 10)
    with ps.ProbeServer(chat=chat) as plain:
        baseline, base_took, _, base_gate = run(plain, None, first_token_timeout=WINDOW)
    with ps.ProbeServer(
        slots=behaviour, metrics=behaviour, gate=behaviour, metrics_flavor="vllm", chat=chat
    ) as srv:
        outcome, took, waits, gate = run(srv, kind, first_token_timeout=WINDOW)
        rounds = srv.probe_requests()
    assert isinstance(baseline, E.FirstTokenTimeoutError)
    assert type(outcome) is type(baseline)
    assert isinstance(outcome, E.FirstTokenTimeoutError)
    assert outcome.deadline == baseline.deadline == "first_token"
    assert outcome.message_key == baseline.message_key
    assert outcome.params["budget"] == baseline.params["budget"]
    assert outcome.tokens == baseline.tokens == 0
    assert waits == [] and gate.extensions == base_gate.extensions == 0  # type: ignore[attr-defined]
    assert rounds, "the probe was asked"
    # Fired at the budget, late by at most the one probe round.
    assert WINDOW <= took < 2 * WINDOW + PROBE_TIMEOUT
    assert base_took < 2 * WINDOW


def test_idle_fires_at_the_first_window() -> None:
    with ps.ProbeServer(slots=ps.always_idle(), chat=fake.withhold_headers(10)) as srv:
        outcome, took, waits, _ = run(srv, "auto", first_token_timeout=WINDOW)
    assert isinstance(outcome, E.FirstTokenTimeoutError) and outcome.deadline == "first_token"
    assert "has not answered the request yet" in str(outcome)
    assert waits == [] and WINDOW <= took < 2 * WINDOW


def test_a_token_within_the_budget_never_asks_the_probe() -> None:
    with ps.ProbeServer(slots=ps.always_busy(), chat=fake.tokens(["quick"])) as srv:
        outcome, _, waits, _ = run(srv, "auto", first_token_timeout=2.0)
        assert srv.probe_requests() == []
    assert outcome == "quick" and waits == []
