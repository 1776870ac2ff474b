"""The fallback chain against real sockets: two fake model servers, real gates."""

from __future__ import annotations

import threading
import time

import pytest
from firstgate.plugin_daemon_client import LLMClient, first_token_gate
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.fallback import (
    FallbackChain,
    FallbackEvent,
    FallbackPolicy,
    Target,
)

from tests.fakes import llm_server as fake

MESSAGES = [{"role": "user", "content": "hi"}]


def target(name: str, srv: fake.FakeLLMServer, **gate: object) -> tuple[Target[str], LLMClient]:
    client = LLMClient("openai-compatible", srv.base_url)

    def attempt() -> str:
        return "".join(c.text for c in client.invoke_llm("m", MESSAGES))

    return (
        Target(
            name,
            attempt,
            base_url=srv.base_url,
            open_gate=lambda: first_token_gate(**gate),  # type: ignore[arg-type]
            allow_same_host_fallback=True,  # both fakes are on 127.0.0.1
        ),
        client,
    )


def test_first_stalls_first_token_timeout_then_the_second_answers() -> None:
    events: list[FallbackEvent] = []
    with (
        fake.FakeLLMServer([fake.headers_then_silence(10)]) as first,
        fake.FakeLLMServer([fake.tokens(["from ", "second"])]) as second,
    ):
        a, ca = target("primary", first, first_token_timeout=0.4)
        b, cb = target("backup", second, first_token_timeout=2.0)
        start = time.monotonic()
        result = FallbackChain([a, b], on_event=events.append).run()
        took = time.monotonic() - start
        ca.close()
        cb.close()
        assert len(first.requests) == len(second.requests) == 1
    assert (result.value, result.target) == ("from second", "backup")
    assert isinstance(result.attempts[0][1], E.FirstTokenTimeoutError)
    assert 0.4 <= took < 0.8
    assert [e.kind for e in events] == ["cap", "swap", "cap"]


def test_attempt_cap_ends_a_pinging_stream_through_the_gate_and_swaps() -> None:
    """No first-token budget at all: only the cap (a deadline of the gate) can end it."""
    events: list[FallbackEvent] = []
    with (
        fake.FakeLLMServer([fake.pings(0.05, 10)]) as first,
        fake.FakeLLMServer([fake.tokens(["rescued"])]) as second,
    ):
        a, ca = target("primary", first)
        b, cb = target("backup", second)
        policy = FallbackPolicy.build(
            ["primary", "backup"], swap_attempt_timeout_ms_by_target={"primary": 500}
        )
        start = time.monotonic()
        result = FallbackChain([a, b], policy, on_event=events.append).run()
        took = time.monotonic() - start
        ca.close()
        cb.close()
    assert result.value == "rescued"
    capped = result.attempts[0][1]
    assert isinstance(capped, E.AttemptCapError) and capped.tokens == 0
    assert "attempt cap of 0.5 s" in str(capped)
    assert 0.5 <= took < 1.0
    assert "cap_fired" in [e.kind for e in events]


def test_a_three_target_chain_starts_no_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The attempt caps are deadlines of each attempt's gate, not timer threads:
    two targets capped mid-stream and a third answering start none."""
    started: list[str] = []
    chain_thread = threading.current_thread()
    original_start = threading.Thread.start

    def counting_start(self: threading.Thread) -> None:
        if threading.current_thread() is chain_thread:  # not the fake servers' own threads
            started.append(self.name)
        original_start(self)

    events: list[FallbackEvent] = []
    with (
        fake.FakeLLMServer([fake.pings(0.05, 10)]) as first,
        fake.FakeLLMServer([fake.pings(0.05, 10)]) as second,
        fake.FakeLLMServer([fake.tokens(["third"])]) as third,
    ):
        built = [target(n, s) for n, s in (("a", first), ("b", second), ("c", third))]
        policy = FallbackPolicy.build(["a", "b", "c"], swap_attempt_timeout_ms=300)
        monkeypatch.setattr(threading.Thread, "start", counting_start)
        result = FallbackChain([t for t, _ in built], policy, on_event=events.append).run()
        monkeypatch.undo()
        for _, llm in built:
            llm.close()
    assert result.value == "third"
    assert [type(error) for _, error in result.attempts] == [E.AttemptCapError] * 2
    assert [e.kind for e in events].count("cap_fired") == 2
    assert started == []


def test_total_budget_fails_closed_instead_of_starting_a_hopeless_attempt() -> None:
    with (
        fake.FakeLLMServer([fake.headers_then_silence(10)]) as first,
        fake.FakeLLMServer([fake.tokens(["never"])]) as second,
    ):
        a, ca = target("primary", first, first_token_timeout=5)
        b, cb = target("backup", second)
        policy = FallbackPolicy.build(["primary", "backup"], swap_total_budget_ms=600)
        start = time.monotonic()
        try:
            FallbackChain([a, b], policy).run()
        except E.FallbackBudgetError as exc:
            error = exc
        took = time.monotonic() - start
        ca.close()
        cb.close()
        assert second.requests == []
    assert isinstance(error.last_error, E.AttemptCapError)  # capped at the 600 ms budget
    assert 0.6 <= took < 1.2
