"""Fallback policy and chain walker on a fake clock; each attempt runs in a gate on it."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.budgets import GateBudgets
from firstgate.plugin_daemon_client.errors import Trip
from firstgate.plugin_daemon_client.fallback import (
    BUDGET_FLOOR_MS,
    DEFAULT_ATTEMPT_CAP_MAX_MS,
    CircuitBreakers,
    FallbackChain,
    FallbackEvent,
    FallbackPolicy,
    Target,
    is_local_host,
)
from firstgate.plugin_daemon_client.gate import Gate, GateTripped, current_gate, gate_in_context


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += ms / 1000.0


class Harness:
    def __init__(self) -> None:
        self.clock = Clock()
        self.gates: list[Gate] = []
        self.events: list[FallbackEvent] = []
        self.calls: list[str] = []
        self.breakers = CircuitBreakers(clock=self.clock)

    @contextmanager
    def open_gate(self) -> Iterator[Gate]:
        """The attempt's gate, on the fake clock, set in the context as the node does."""
        gate = Gate(GateBudgets(), clock=self.clock)
        self.gates.append(gate)
        with gate_in_context(gate):
            yield gate

    @property
    def caps(self) -> list[float | None]:
        return [gate.attempt_cap for gate in self.gates]

    def wait_past_the_cap(self) -> None:
        """What a socket read does when the attempt's cap passes: the gate trips."""
        gate = current_gate()
        assert gate is not None
        deadline = gate.next_deadline()
        assert deadline is not None and deadline[1] is Trip.ATTEMPT_CAP
        self.clock.now = deadline[0]
        try:
            gate.expire(deadline[1])
        except GateTripped as tripped:
            raise tripped.error from None  # what the client raises
        raise AssertionError("the cap did not trip the gate")

    def target(
        self,
        name: str,
        outcome: E.FirstGateError | str | Callable[[], Any] = "ok",
        *,
        takes_ms: float = 0.0,
        **kw: Any,
    ) -> Target[str]:
        def attempt() -> str:
            self.calls.append(name)
            self.clock.advance_ms(takes_ms)
            if isinstance(outcome, E.FirstGateError):
                raise outcome
            if callable(outcome):
                return outcome()
            return f"{outcome} from {name}"

        kw.setdefault("open_gate", self.open_gate)
        return Target(name, attempt, **kw)

    def chain(self, targets: list[Target[str]], **policy: Any) -> FallbackChain[str]:
        return FallbackChain(
            targets,
            FallbackPolicy.build([t.name for t in targets], **policy),
            breakers=self.breakers,
            on_event=self.events.append,
            clock=self.clock,
        )

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


def timeout() -> E.FirstGateError:
    return E.FirstTokenTimeoutError("errors.firstTokenTimeout.accepted", budget="1")


# --- moving on --------------------------------------------------------------------


def test_transient_error_moves_to_the_next_target() -> None:
    h = Harness()
    result = h.chain([h.target("a", timeout()), h.target("b")]).run()
    assert (result.value, result.target) == ("ok from b", "b")
    assert [name for name, _ in result.attempts] == ["a"]
    swap = next(e for e in h.events if e.kind == "swap")
    assert swap.params["failed"] == "a" and swap.target == "b"
    assert "switching to b" in swap.message


@pytest.mark.parametrize(
    "error",
    [
        E.BadRequestError(detail="bad"),
        E.AuthorizationError(detail="no"),
        E.StreamCancelledError(reason="user abort"),
    ],
)
def test_non_transient_error_ends_the_chain_with_that_error(error: E.FirstGateError) -> None:
    h = Harness()
    with pytest.raises(type(error)):
        h.chain([h.target("a", error), h.target("b")]).run()
    assert h.calls == ["a"] and "swap" not in h.kinds()


@pytest.mark.parametrize(
    "error",
    [
        E.RateLimitError(detail="slow down"),
        E.ServerUnavailableError(detail="503"),
        E.ConnectError(url="u", detail="refused"),
        E.ConnectionLostError(detail="reset"),
    ],
)
def test_every_transient_kind_moves_on(error: E.FirstGateError) -> None:
    h = Harness()
    assert h.chain([h.target("a", error), h.target("b")]).run().target == "b"


def test_all_targets_failing_raises_exhausted_with_the_history() -> None:
    h = Harness()
    first, last = timeout(), E.ServerUnavailableError(detail="503")
    with pytest.raises(E.FallbackExhaustedError) as info:
        h.chain([h.target("a", first), h.target("b", last)]).run()
    err = info.value
    assert [n for n, _ in err.attempts] == ["a", "b"] and err.last_error is last
    assert err.__cause__ is last and err.transient
    assert "a, b" in str(err) and "503" in str(err)


# --- caps -----------------------------------------------------------------------------


def test_cap_fired_through_the_gate_becomes_attempt_cap_error_and_swaps() -> None:
    h = Harness()

    def stalls() -> str:
        h.wait_past_the_cap()  # the cap passes while the request waits
        raise AssertionError("unreachable")

    result = h.chain(
        [h.target("a", stalls), h.target("b")], swap_attempt_timeout_ms_by_target={"a": 300}
    ).run()
    assert result.target == "b"
    assert isinstance(result.attempts[0][1], E.AttemptCapError)
    assert result.attempts[0][1].deadline == "attempt_cap"
    assert h.gates[0].fired is Trip.ATTEMPT_CAP
    assert h.caps == pytest.approx([0.3, 120.0])
    assert "cap_fired" in h.kinds()


def test_a_user_cancel_is_not_mistaken_for_the_cap() -> None:
    h = Harness()

    def user_aborts() -> str:
        gate = current_gate()
        assert gate is not None
        gate.cancel("user abort")
        raise gate.tripped

    with pytest.raises(E.StreamCancelledError):
        h.chain([h.target("a", user_aborts), h.target("b")]).run()
    assert h.calls == ["a"]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({}, (DEFAULT_ATTEMPT_CAP_MAX_MS, "max")),
        ({"swap_attempt_timeout_ms": 5000}, (5000.0, "global")),
        ({"swap_attempt_timeout_ms": 500_000}, (120_000.0, "global")),  # clamped
        ({"swap_attempt_timeout_ms_by_target": {"a": 700}}, (700.0, "target")),
        ({"swap_attempt_timeout_ms_by_target": {"a": 10**9}}, (120_000.0, "target")),
        (
            {"swap_attempt_timeout_ms_max": 3000, "swap_attempt_timeout_ms": 5000},
            (3000.0, "global"),
        ),
    ],
)
def test_cap_resolution_and_clamp(policy: dict, expected: tuple[float, str]) -> None:
    assert FallbackPolicy.build(["a", "b"], **policy).cap_for("a") == expected


@pytest.mark.parametrize("bad", [0, -1, -0.5, math.nan, math.inf, "fast", "5000", True, None])
def test_bad_per_target_value_falls_to_the_global_value(bad: object) -> None:
    policy = FallbackPolicy.build(
        ["a", "b"],
        swap_attempt_timeout_ms=4000,
        swap_attempt_timeout_ms_by_target={"a": bad, "b": 900},
    )
    assert policy.cap_for("a") == (4000.0, "global")  # never "no cap", never 0
    assert policy.cap_for("b") == (900.0, "target")
    warnings = [w for w in policy.warnings if w.reason == "bad_cap"]
    assert len(warnings) == 1
    assert "swap_attempt_timeout_ms_by_target.a" in warnings[0].message


def test_bad_per_target_value_without_a_global_falls_to_the_clamp() -> None:
    policy = FallbackPolicy.build(["a"], swap_attempt_timeout_ms_by_target={"a": 0})
    assert policy.cap_for("a") == (DEFAULT_ATTEMPT_CAP_MAX_MS, "max")


@pytest.mark.parametrize("bad", [0, -5, math.nan, "big", False])
def test_bad_clamp_is_120_s(bad: object) -> None:
    policy = FallbackPolicy.build(["a"], swap_attempt_timeout_ms_max=bad)
    assert policy.cap_max_ms == 120_000.0
    assert [w.reason for w in policy.warnings] == ["bad_cap"]


def test_warnings_are_emitted_once_per_chain() -> None:
    h = Harness()
    chain = h.chain(
        [h.target("a")],
        swap_attempt_timeout_ms_by_target={"a": math.nan, "ghost": 100},
    )
    chain.run()
    chain.run()
    reasons = [e.reason for e in h.events if e.kind == "config_warning"]
    assert sorted(reasons) == ["bad_cap", "unknown_target"]
    unknown = next(e for e in h.events if e.reason == "unknown_target")
    assert "swap_attempt_timeout_ms_by_target.ghost" in unknown.message


# --- total budget ----------------------------------------------------------------------


@pytest.mark.parametrize(("left_ms", "tries_b"), [(249, False), (250, True), (251, True)])
def test_budget_floor(left_ms: float, tries_b: bool) -> None:
    h = Harness()
    targets = [h.target("a", timeout(), takes_ms=1000 - left_ms), h.target("b")]
    chain = h.chain(targets, swap_total_budget_ms=1000)
    if tries_b:
        assert chain.run().target == "b"
        assert h.caps[1] == pytest.approx(left_ms / 1000)  # min(cap, remaining)
        cap_event = [e for e in h.events if e.kind == "cap"][1]
        assert cap_event.reason == "budget"
    else:
        with pytest.raises(E.FallbackBudgetError) as info:
            chain.run()
        assert h.calls == ["a"]
        stop = next(e for e in h.events if e.kind == "budget_stop")
        assert stop.target == "b" and stop.params["remaining"] == "249"
        assert info.value.last_error is not None and info.value.transient
        assert "250 ms" in str(info.value)


def test_floor_constant() -> None:
    assert BUDGET_FLOOR_MS == 250.0


def test_a_budget_below_the_floor_never_starts_the_first_attempt() -> None:
    h = Harness()
    with pytest.raises(E.FallbackBudgetError):
        h.chain([h.target("a")], swap_total_budget_ms=200).run()
    assert h.calls == []


def test_each_attempt_gets_min_of_cap_and_remaining() -> None:
    h = Harness()
    targets = [h.target("a", timeout(), takes_ms=400), h.target("b")]
    h.chain(targets, swap_attempt_timeout_ms=3000, swap_total_budget_ms=1000).run()
    assert h.caps == pytest.approx([1.0, 0.6])


@pytest.mark.parametrize("value", [None, 0, -1, math.nan, math.inf])
def test_total_budget_disabled_values(value: object) -> None:
    assert FallbackPolicy.build(["a"], swap_total_budget_ms=value).total_budget_ms is None


@pytest.mark.parametrize("value", ["1000", [1], True])
def test_total_budget_that_is_not_a_number_is_an_error(value: object) -> None:
    with pytest.raises(E.FallbackConfigError, match="swap_total_budget_ms"):
        FallbackPolicy.build(["a"], swap_total_budget_ms=value)


# --- circuit breaker ----------------------------------------------------------------------


def test_breaker_opens_at_n_consecutive_failures_and_closes_after_cooldown() -> None:
    h = Harness()
    n = h.breakers.threshold
    assert n == 5 and h.breakers.cooldown_s == 60.0
    failing = h.target("a", timeout())
    chain = h.chain([failing, h.target("b")])
    for _ in range(n - 1):
        chain.run()
    assert h.calls.count("a") == n - 1 and h.breakers.open_for("a") is None  # N-1: still tried
    chain.run()
    assert h.calls.count("a") == n  # the N-th failure opens it
    h.events.clear()
    chain.run()
    assert h.calls.count("a") == n  # skipped
    skip = next(e for e in h.events if e.kind == "breaker_skip")
    assert skip.target == "a" and skip.params["failures"] == n
    assert "5 times in a row" in skip.message and "60 s" in skip.message
    h.clock.advance_ms(59_999)
    chain.run()
    assert h.calls.count("a") == n  # cooldown not over
    h.clock.advance_ms(1)
    chain.run()
    assert h.calls.count("a") == n + 1  # half-open: tried again, failed, reopened
    chain.run()
    assert h.calls.count("a") == n + 1


def test_capped_attempts_count_for_the_breaker_and_success_resets() -> None:
    breakers = CircuitBreakers(threshold=2)
    capped = E.AttemptCapError(target="a", cap="1")
    breakers.record("a", capped)
    breakers.record("a", None)
    breakers.record("a", capped)
    assert breakers.open_for("a") is None
    breakers.record("a", capped)
    assert breakers.open_for("a") is not None


def test_an_answer_that_shows_the_server_is_up_resets_the_count() -> None:
    breakers = CircuitBreakers(threshold=2)
    breakers.record("a", timeout())
    breakers.record("a", E.BadRequestError(detail="x"))
    breakers.record("a", timeout())
    assert breakers.open_for("a") is None and breakers.failures("a") == 1


def test_every_target_skipped_fails_closed() -> None:
    h = Harness()
    h.breakers = CircuitBreakers(threshold=1, clock=h.clock)
    chain = h.chain([h.target("a", timeout())])
    with pytest.raises(E.FallbackExhaustedError):
        chain.run()
    with pytest.raises(E.NoFallbackTargetError) as info:
        chain.run()
    assert "Skipping a" in str(info.value)


@pytest.mark.parametrize(("threshold", "cooldown"), [(0, 60), (-1, 60), (5, 0), (5, math.nan)])
def test_breaker_settings_are_checked(threshold: int, cooldown: float) -> None:
    with pytest.raises(ValueError):
        CircuitBreakers(threshold=threshold, cooldown_s=cooldown)


# --- same host -------------------------------------------------------------------------------

LOCAL = "http://127.0.0.1:8080/v1"


def test_same_local_host_is_skipped_while_the_first_is_busy() -> None:
    h = Harness()
    targets = [
        h.target("big", timeout(), base_url=LOCAL),
        h.target("small", base_url="http://127.0.0.1:8080"),
        h.target("remote", base_url="http://127.0.0.1:9090/v1"),
    ]
    assert h.chain(targets).run().target == "remote"
    assert h.calls == ["big", "remote"]
    skip = next(e for e in h.events if e.kind == "same_host_skip")
    assert skip.target == "small" and skip.params["busy"] == "big"
    assert "allow_same_host_fallback" in skip.message


def test_same_host_fallback_when_the_route_opts_in() -> None:
    h = Harness()
    targets = [
        h.target("big", timeout(), base_url=LOCAL),
        h.target("small", base_url=LOCAL, allow_same_host_fallback=True),
    ]
    assert h.chain(targets).run().target == "small"


def test_same_host_is_allowed_when_the_probe_says_idle() -> None:
    h = Harness()
    probes: list[str] = []
    targets = [
        h.target("big", timeout(), base_url=LOCAL, probe=lambda: probes.append("x") or "idle"),
        h.target("small", base_url=LOCAL),
    ]
    assert h.chain(targets).run().target == "small" and probes == ["x"]


def test_same_host_is_skipped_when_the_probe_says_busy_after_any_error() -> None:
    h = Harness()
    targets = [
        h.target(
            "big", E.ServerUnavailableError(detail="503"), base_url=LOCAL, probe=lambda: "busy"
        ),
        h.target("small", base_url=LOCAL),
    ]
    with pytest.raises(E.FallbackExhaustedError):
        h.chain(targets).run()


def test_same_host_after_a_non_timeout_error_without_probe_is_tried() -> None:
    h = Harness()
    targets = [
        h.target("big", E.RateLimitError(detail="429"), base_url=LOCAL),
        h.target("small", base_url=LOCAL),
    ]
    assert h.chain(targets).run().target == "small"


def test_remote_targets_on_one_host_are_each_others_fallback() -> None:
    h = Harness()
    targets = [
        h.target("large", timeout(), base_url="https://api.example.com/v1"),
        h.target("mini", base_url="https://api.example.com/v1"),
    ]
    assert h.chain(targets).run().target == "mini"


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8080", True),
        ("http://localhost:8080/v1", True),
        ("http://[::1]:8080", True),
        ("http://192.168.1.20:11434", True),
        ("http://llama:8080", True),
        ("http://gpu-box.lan:8080", True),
        ("https://api.example.com/v1", False),
        ("http://8.8.8.8", False),
    ],
)
def test_is_local_host(url: str, local: bool) -> None:
    assert is_local_host(url) is local


def test_chain_needs_unique_names() -> None:
    h = Harness()
    with pytest.raises(ValueError):
        FallbackChain([h.target("a"), h.target("a")])
    with pytest.raises(ValueError):
        FallbackChain([])
