"""The gate's bookkeeping on a fake clock: which deadline binds, fire/disarm exclusivity."""

from __future__ import annotations

import math

import pytest
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.budgets import GateBudgets, coerce_budget
from firstgate.plugin_daemon_client.gate import Gate, GateTripped, WaitInfo


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_gate(**budgets: object) -> tuple[Gate, Clock]:
    clock = Clock()
    gate = Gate(GateBudgets.build(**budgets), clock=clock)
    gate.begin()
    return gate, clock


@pytest.mark.parametrize("value", [None, 0, -3, math.nan, math.inf, -math.inf, 0.0])
def test_disabled_values(value: object) -> None:
    assert coerce_budget("x", value) is None


@pytest.mark.parametrize("value", ["1", b"1", True, False, {}, None.__class__])
def test_rejected_values(value: object) -> None:
    with pytest.raises(E.GateConfigError, match="x must be a number"):
        coerce_budget("x", value)


def test_first_token_phase_binds_first_token_then_idle() -> None:
    gate, clock = make_gate(first_token_timeout=10, idle_timeout=2, stream_total_timeout=60)
    assert gate.next_deadline() == (110.0, "first_token")
    clock.now = 105
    gate.note_bytes(10)  # pings do not end the first-token phase
    assert gate.next_deadline() == (110.0, "first_token")
    gate.note_tokens(1, "hi")
    assert gate.next_deadline() == (107.0, "idle")
    clock.now = 159
    gate.note_bytes(1)
    assert gate.next_deadline() == (160.0, "stream_total")


def test_no_idle_deadline_before_the_first_token() -> None:
    gate, _ = make_gate(idle_timeout=2)
    gate.note_bytes(5)
    assert gate.next_deadline() is None


def test_a_delivered_token_disarms_the_first_token_deadline() -> None:
    gate, clock = make_gate(first_token_timeout=1)
    gate.note_tokens(1, "x")
    clock.now = 200
    gate.expire("first_token")  # must not raise: a token won
    assert gate.tripped is None and gate.fired is None


def test_a_fired_deadline_refuses_later_tokens() -> None:
    gate, clock = make_gate(first_token_timeout=1)
    clock.now = 101.5
    with pytest.raises(GateTripped) as info:
        gate.expire("first_token")
    assert isinstance(info.value.error, E.FirstTokenTimeoutError)
    with pytest.raises(GateTripped):
        gate.note_tokens(1, "too late")
    assert gate.progress.tokens == 0  # never both delivered and timed out


def test_cancel_records_the_reason_first_and_wins_over_later_deadlines() -> None:
    gate, clock = make_gate(first_token_timeout=1)
    gate.note_tokens(1, "a")
    gate.cancel("workflow aborted")
    clock.now = 500
    with pytest.raises(GateTripped) as info:
        gate.expire("idle")
    assert isinstance(info.value.error, E.StreamCancelledError)
    assert gate.fired == "cancelled"
    assert info.value.error.partial_text == "a"


def test_watchdog_extends_while_busy_then_fires_at_the_ceiling() -> None:
    answers = iter(["busy", "busy", "busy", "busy"])
    waits: list[WaitInfo] = []
    clock = Clock()
    gate = Gate(
        GateBudgets.build(first_token_timeout=10, ceiling=25),
        probe=lambda: next(answers),
        on_wait=waits.append,
        prompt_tokens=90_700,
        clock=clock,
    )
    gate.begin()
    clock.now = 110
    gate.expire("first_token")
    assert gate.next_deadline() == (120.0, "first_token") and gate.extensions == 1
    clock.now = 120
    gate.expire("first_token")
    assert gate.next_deadline() == (125.0, "first_token")  # clamped to the ceiling
    clock.now = 125
    with pytest.raises(GateTripped) as info:
        gate.expire("first_token")
    assert info.value.error.deadline == "ceiling"
    assert "kept reporting busy" in str(info.value.error)
    assert len(waits) == 2 and "90,700" in waits[0].message


@pytest.mark.parametrize("answer", ["idle", None])
def test_watchdog_idle_or_no_signal_fires_like_no_probe(answer: str | None) -> None:
    calls = []
    clock = Clock()
    gate = Gate(
        GateBudgets.build(first_token_timeout=10),
        probe=lambda: calls.append(1) or answer,
        clock=clock,
    )
    gate.begin()
    clock.now = 110
    with pytest.raises(GateTripped) as info:
        gate.expire("first_token")
    assert info.value.error.deadline == "first_token" and calls == [1]


def test_a_probe_that_raises_is_no_signal() -> None:
    def broken() -> str:
        raise OSError("down")

    gate = Gate(GateBudgets.build(first_token_timeout=1), probe=broken)
    gate.begin()
    with pytest.raises(GateTripped):
        gate.expire("first_token")
