"""The gate's deadlines against a real-socket server, in threads and (second run) under gevent.

Timing assertions are generous bounds around behaviour: a deadline fires
after its budget and well before twice the budget.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from firstgate.plugin_daemon_client import LLMClient, first_token_gate
from firstgate.plugin_daemon_client import errors as E

from tests.fakes import llm_server as fake

BUDGET = 0.5
MESSAGES = [{"role": "user", "content": "hi"}]


def collect(client: LLMClient) -> str:
    return "".join(chunk.text for chunk in client.invoke_llm("m", MESSAGES))


def timed_failure(client: LLMClient, **gate: object) -> tuple[BaseException, float]:
    start = time.monotonic()
    with pytest.raises(E.FirstGateError) as info:
        with first_token_gate(**gate):
            collect(client)
    return info.value, time.monotonic() - start


@pytest.fixture(params=["openai", "daemon"])
def protocol(request: pytest.FixtureRequest) -> str:
    return request.param


def make_client(srv: fake.FakeLLMServer, protocol: str, api_key: str | None = None) -> LLMClient:
    if protocol == "openai":
        return LLMClient("openai-compatible", srv.base_url, api_key=api_key)
    return LLMClient(
        "plugin-daemon", srv.root_url, api_key=api_key, tenant_id="t1", plugin_id="p/x"
    )


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(fake.withhold_headers(5), id="a-withholds-headers"),
        pytest.param(fake.headers_then_silence(5), id="b-headers-then-silence"),
        pytest.param(fake.pings(0.1, 5), id="c-pings-every-100ms"),
        pytest.param(fake.role_then_stall(5), id="role-only-delta-then-stall"),
    ],
)
def test_first_token_deadline_fires_near_budget(scenario: fake.Scenario, protocol: str) -> None:
    with fake.FakeLLMServer([scenario]) as srv:
        exc, took = timed_failure(make_client(srv, protocol), first_token_timeout=BUDGET)
    assert isinstance(exc, E.FirstTokenTimeoutError), exc
    assert exc.deadline == "first_token"
    assert exc.tokens == 0 and exc.partial_text == ""
    assert BUDGET <= took < 2 * BUDGET
    assert BUDGET <= exc.elapsed_s < 2 * BUDGET
    assert "may still be evaluating the prompt" in str(exc)


def test_first_token_message_says_whether_headers_arrived() -> None:
    with fake.FakeLLMServer([fake.withhold_headers(5)]) as srv:
        withheld, _ = timed_failure(make_client(srv, "openai"), first_token_timeout=0.3)
    with fake.FakeLLMServer([fake.headers_then_silence(5)]) as srv:
        accepted, _ = timed_failure(make_client(srv, "openai"), first_token_timeout=0.3)
    assert "has not answered the request yet" in str(withheld)
    assert "accepted the request" in str(accepted)


def test_httpx_read_timeout_alone_never_fires_against_pings() -> None:
    """Why the gate exists: each ping resets a per-read timeout (DESIGN.md)."""
    with fake.FakeLLMServer([fake.pings(0.1, 1.5, then_tokens=["late"])]) as srv:
        client = LLMClient("openai-compatible", srv.base_url, timeout=httpx.Timeout(5.0, read=0.5))
        start = time.monotonic()
        text = collect(client)
    assert text == "late"
    assert time.monotonic() - start >= 1.5


def test_pings_then_tokens_within_budget_succeed(protocol: str) -> None:
    with fake.FakeLLMServer([fake.pings(0.1, 0.4, then_tokens=["a", "b"])]) as srv:
        with first_token_gate(first_token_timeout=2.0):
            assert collect(make_client(srv, protocol)) == "ab"


def test_idle_timeout_after_tokens_keeps_partial_output(protocol: str) -> None:
    with fake.FakeLLMServer([fake.stall_after(3, seconds=5)]) as srv:
        exc, took = timed_failure(
            make_client(srv, protocol), first_token_timeout=BUDGET, idle_timeout=BUDGET
        )
    assert isinstance(exc, E.IdleTimeoutError), exc
    assert exc.deadline == "idle"
    assert exc.tokens == 3 and exc.partial_text == "t0 t1 t2 "
    assert BUDGET <= took < 2 * BUDGET
    assert "stopped sending mid-reply" in str(exc)


def test_first_token_budget_does_not_apply_after_the_first_token() -> None:
    """Tokens every 0.3 s for 1.5 s with a 0.5 s first-token budget and no idle budget."""
    texts = [f"w{i} " for i in range(5)]
    with fake.FakeLLMServer([fake.tokens(texts, interval=0.3)]) as srv:
        with first_token_gate(first_token_timeout=BUDGET):
            assert collect(make_client(srv, "openai")) == "".join(texts)


def test_stream_cap_fires_on_a_trickle_that_never_idles(protocol: str) -> None:
    with fake.FakeLLMServer([fake.trickle(0.05, duration=10)]) as srv:
        exc, took = timed_failure(
            make_client(srv, protocol), idle_timeout=0.3, stream_total_timeout=1.0
        )
    assert isinstance(exc, E.StreamTotalTimeoutError), exc
    assert exc.deadline == "stream_total"
    assert exc.partial_text == "start "
    assert 1.0 <= took < 2.0
    assert "not a stall" in str(exc)


def test_slow_consumer_is_not_a_server_stall() -> None:
    """Tokens every 0.1 s (under the 0.3 s idle budget); the consumer takes 0.5 s per chunk.
    By the time it reads again the idle deadline has passed, but the data is waiting."""
    texts = [f"s{i} " for i in range(4)]
    with fake.FakeLLMServer([fake.tokens(texts, interval=0.1)]) as srv:
        client = make_client(srv, "openai")
        got = []
        with first_token_gate(first_token_timeout=2.0, idle_timeout=0.3):
            for chunk in client.invoke_llm("m", MESSAGES):
                got.append(chunk.text)
                time.sleep(0.5)
    assert "".join(got) == "".join(texts)


@pytest.mark.parametrize("value", [None, 0, 0.0, -1, float("nan"), float("inf"), -float("inf")])
def test_non_positive_or_non_finite_budgets_mean_disabled(value: object) -> None:
    with fake.FakeLLMServer([fake.pings(0.05, 0.4, then_tokens=["ok"])]) as srv:
        with first_token_gate(
            first_token_timeout=value, idle_timeout=value, stream_total_timeout=value
        ):
            assert collect(make_client(srv, "openai")) == "ok"


@pytest.mark.parametrize("value", ["5", "fast", True, [1], object()])
def test_budgets_that_are_not_numbers_are_rejected(value: object) -> None:
    with pytest.raises(ValueError, match="first_token_timeout"):
        with first_token_gate(first_token_timeout=value):
            pass


def test_concurrent_calls_each_get_their_own_budget() -> None:
    """The ContextVar reaches the socket read of the thread that opened the gate."""
    results: dict[float, float] = {}
    with fake.FakeLLMServer([fake.pings(0.1, 5)]) as srv:
        client = make_client(srv, "openai")

        def call(budget: float) -> None:
            start = time.monotonic()
            try:
                with first_token_gate(first_token_timeout=budget):
                    collect(client)
            except E.FirstTokenTimeoutError:
                results[budget] = time.monotonic() - start

        threads = [threading.Thread(target=call, args=(b,)) for b in (0.3, 1.2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert set(results) == {0.3, 1.2}
    assert 0.3 <= results[0.3] < 0.6
    assert 1.2 <= results[1.2] < 2.4


def test_gate_is_reset_after_the_block_even_on_error() -> None:
    from firstgate.plugin_daemon_client import current_gate

    assert current_gate() is None
    with pytest.raises(RuntimeError):
        with first_token_gate(first_token_timeout=1.0) as gate:
            assert current_gate() is gate
            raise RuntimeError("boom")
    assert current_gate() is None


def test_outside_a_gate_the_transport_is_plain_httpx() -> None:
    with fake.FakeLLMServer([fake.pings(0.1, 0.6, then_tokens=["plain"])]) as srv:
        assert collect(make_client(srv, "openai")) == "plain"


def test_watchdog_keeps_reading_on_the_same_connection_while_busy() -> None:
    waits = []
    probes = []

    def probe() -> str:
        probes.append(time.monotonic())
        return "busy"

    with fake.FakeLLMServer([fake.pings(0.1, 1.2, then_tokens=["finally"])]) as srv:
        with first_token_gate(first_token_timeout=0.4, probe=probe, on_wait=waits.append) as gate:
            assert collect(make_client(srv, "openai")) == "finally"
        assert len(srv.requests) == 1  # no new request, no lost prefill
    assert gate.extensions == len(waits) == len(probes) >= 2  # one probe per expired window
    assert len(probes) <= 4


def test_watchdog_ceiling_bounds_a_backend_that_always_claims_busy() -> None:
    with fake.FakeLLMServer([fake.pings(0.1, 10)]) as srv:
        exc, took = timed_failure(
            make_client(srv, "openai"), first_token_timeout=0.3, probe=lambda: "busy", ceiling=1.0
        )
    assert isinstance(exc, E.FirstTokenTimeoutError) and exc.deadline == "ceiling"
    assert 1.0 <= took < 2.0
