"""The continuous first-token budget, the prompt-size estimate and the precedence resolver."""

from __future__ import annotations

import math

import pytest
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.first_token_budget import (
    DEFAULT_CEILING_S,
    ENV_BASE,
    ENV_CEILING,
    ENV_COLD_START,
    ENV_PER_1K,
    ENV_TIMEOUT,
    BudgetFormula,
    estimate_prompt_tokens,
    estimate_text_tokens,
    resolve_first_token_budget,
)
from hypothesis import given
from hypothesis import strategies as st

DEFAULT = BudgetFormula()

# The step schedule the formula replaces: (up to N prompt tokens, seconds).
# It was a fixed budget per context-size band; the continuous default must
# never give a prompt less time than this schedule did.
STEP_SCHEDULE: list[tuple[float, float]] = [
    (4_000, 60.0),
    (16_000, 120.0),
    (64_000, 300.0),
    (200_000, 600.0),
    (math.inf, 900.0),
]


def step_budget(tokens: int) -> float:
    return next(seconds for limit, seconds in STEP_SCHEDULE if tokens <= limit)


def test_defaults() -> None:
    assert DEFAULT.budget(0) == 360.0
    assert DEFAULT.budget(1_000) == 364.0
    assert DEFAULT.budget(90_700) == pytest.approx(722.8)
    assert DEFAULT.budget(10_000_000) == DEFAULT_CEILING_S == 1800.0


@given(st.integers(min_value=0, max_value=2_000_000))
def test_continuous_and_never_decreasing(n: int) -> None:
    step = DEFAULT.budget(n + 1) - DEFAULT.budget(n)
    assert 0.0 <= step <= DEFAULT.per_1k_s / 1000 + 1e-9


def test_no_step_at_any_context_size_up_to_past_the_ceiling() -> None:
    """Every n, not a sample: a step hidden at one context size must not survive."""
    limit = DEFAULT.per_1k_s / 1000 + 1e-9
    previous = DEFAULT.budget(0)
    for n in range(1, 400_001):  # the default line meets the ceiling at 360,000
        current = DEFAULT.budget(n)
        assert 0.0 <= current - previous <= limit, n
        previous = current


@given(st.integers(min_value=0, max_value=2_000_000))
def test_never_below_the_step_schedule_it_replaces(n: int) -> None:
    assert DEFAULT.budget(n) >= step_budget(n)


@pytest.mark.parametrize("n", [0, 3_999, 4_000, 4_001, 16_000, 16_001, 64_000, 64_001, 200_000])
def test_step_schedule_boundaries(n: int) -> None:
    assert DEFAULT.budget(n) >= step_budget(n)


@given(st.integers(min_value=0, max_value=5_000_000), st.floats(min_value=1, max_value=5000))
def test_clamped_at_the_ceiling(n: int, ceiling: float) -> None:
    assert BudgetFormula(ceiling_s=ceiling).budget(n) <= ceiling


def test_reaches_the_ceiling_exactly_where_the_line_crosses_it() -> None:
    # 360 + 4 * n / 1000 = 1800  <=>  n = 360,000
    assert DEFAULT.budget(359_999) < 1800.0
    assert DEFAULT.budget(360_000) == 1800.0
    assert DEFAULT.budget(360_001) == 1800.0


# --- the estimate ---------------------------------------------------------------


@given(st.text(), st.text(min_size=1))
def test_estimate_is_monotone_in_the_text(text: str, more: str) -> None:
    assert estimate_text_tokens(text + more) >= estimate_text_tokens(text)
    short = estimate_prompt_tokens([{"role": "user", "content": text}])
    long = estimate_prompt_tokens([{"role": "user", "content": text + more}])
    assert long >= short


def test_estimate_heuristic() -> None:
    assert estimate_text_tokens("") == 0
    assert estimate_text_tokens("abcd" * 1000) == 1000  # ~4 ASCII chars per token
    assert estimate_text_tokens("漢字" * 500) == 1000  # ~1 token per CJK char
    messages = [{"role": "system", "content": "a" * 400}, {"role": "user", "content": "b" * 400}]
    assert estimate_prompt_tokens(messages) == 3 + 2 * 4 + 200
    parts = [{"role": "user", "content": [{"type": "text", "text": "c" * 40}, {"type": "image"}]}]
    assert estimate_prompt_tokens(parts) == 3 + 4 + 10
    assert estimate_prompt_tokens([{"role": "assistant", "content": None}]) == 7


# --- precedence -------------------------------------------------------------------

ROUTE = {"first_token_timeout_s": 50, "first_token_ceiling_s": 900}


def test_node_value_wins_over_everything() -> None:
    got = resolve_first_token_budget(
        12.5, prompt_tokens=1000, route=ROUTE, env={ENV_TIMEOUT: "40", ENV_CEILING: "600"}
    )
    assert (got.first_token_s, got.source) == (12.5, "node")
    assert (got.ceiling_s, got.ceiling_source) == (600.0, "env")


def test_env_wins_over_route() -> None:
    got = resolve_first_token_budget(None, route=ROUTE, env={ENV_TIMEOUT: "40"})
    assert (got.first_token_s, got.source) == (40.0, "env")
    assert (got.ceiling_s, got.ceiling_source) == (900.0, "route")


def test_route_wins_over_formula() -> None:
    got = resolve_first_token_budget(None, prompt_tokens=10**6, route=ROUTE, env={})
    assert (got.first_token_s, got.source) == (50.0, "route")


def test_formula_when_nothing_is_pinned() -> None:
    got = resolve_first_token_budget("auto", prompt_tokens=90_700, env={ENV_TIMEOUT: "auto"})
    assert got.source == "formula" and got.first_token_s == pytest.approx(722.8)
    assert (got.ceiling_s, got.ceiling_source) == (1800.0, "default")
    assert got.gate_kwargs() == {
        "first_token_timeout": pytest.approx(722.8),
        "ceiling": 1800.0,
        "prompt_tokens": 90_700,
    }


def test_a_pinned_number_is_not_clamped_to_the_ceiling() -> None:
    got = resolve_first_token_budget(3600, env={ENV_CEILING: "1800"})
    assert got.first_token_s == 3600.0
    got = resolve_first_token_budget(None, env={ENV_TIMEOUT: "2400", ENV_CEILING: "1800"})
    assert got.first_token_s == 2400.0


def test_the_formula_is_clamped_to_the_resolved_ceiling() -> None:
    got = resolve_first_token_budget(
        None, prompt_tokens=10**6, route={"first_token_ceiling_s": 500}
    )
    assert got.first_token_s == 500.0


def test_formula_constants_env_then_route_then_default() -> None:
    route = {"first_token_cold_start_s": 0, "first_token_base_s": 10, "first_token_per_1k_s": 1}
    got = resolve_first_token_budget(None, prompt_tokens=2000, route=route, env={ENV_BASE: "20"})
    assert got.first_token_s == 0 + 20 + 2
    env = {ENV_COLD_START: "1", ENV_BASE: "2", ENV_PER_1K: "3"}
    assert resolve_first_token_budget(None, prompt_tokens=1000, env=env).first_token_s == 6.0


@pytest.mark.parametrize("value", [0, 0.0, -1, math.nan, math.inf])
def test_node_zero_or_non_finite_disables_like_the_gate(value: float) -> None:
    got = resolve_first_token_budget(value, env={ENV_TIMEOUT: "40"})
    assert got.first_token_s is None and got.source == "node"


def test_env_zero_disables() -> None:
    got = resolve_first_token_budget(None, route=ROUTE, env={ENV_TIMEOUT: "0"})
    assert got.first_token_s is None and got.source == "env"


@pytest.mark.parametrize(
    ("env", "route", "named"),
    [
        ({ENV_TIMEOUT: "fast"}, {}, ENV_TIMEOUT),
        ({ENV_TIMEOUT: "-5"}, {}, ENV_TIMEOUT),
        ({ENV_TIMEOUT: "nan"}, {}, ENV_TIMEOUT),
        ({ENV_PER_1K: "inf"}, {}, ENV_PER_1K),
        ({ENV_COLD_START: "3m"}, {}, ENV_COLD_START),
        ({}, {"first_token_timeout_s": "soon"}, "providers.local.first_token_timeout_s"),
        ({}, {"first_token_base_s": True}, "providers.local.first_token_base_s"),
        ({}, {"first_token_per_1k_s": -1}, "providers.local.first_token_per_1k_s"),
    ],
)
def test_invalid_settings_name_the_variable_or_key(env: dict, route: dict, named: str) -> None:
    with pytest.raises(E.BudgetConfigError) as info:
        resolve_first_token_budget(None, route=route, route_name="local", env=env)
    assert named in str(info.value)


@pytest.mark.parametrize("value", ["0", "-3", "never", "nan"])
def test_invalid_ceiling_names_the_variable(value: str) -> None:
    with pytest.raises(E.CeilingConfigError, match=ENV_CEILING):
        resolve_first_token_budget(None, env={ENV_CEILING: value})


def test_a_bad_formula_constant_is_reported_even_when_a_value_is_pinned() -> None:
    with pytest.raises(E.BudgetConfigError, match=ENV_BASE):
        resolve_first_token_budget(30, env={ENV_BASE: "lots"})


def test_node_value_that_is_not_a_number_is_rejected() -> None:
    with pytest.raises(E.GateConfigError, match="first_token_timeout"):
        resolve_first_token_budget("soon")
