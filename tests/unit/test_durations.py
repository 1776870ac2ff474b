"""The one parser every timeout, budget and cap goes through."""

from __future__ import annotations

import math

import pytest
from firstgate.common.durations import (
    DurationError,
    is_unset,
    parse_duration,
    positive_or_none,
    require_positive_seconds,
)


@pytest.mark.parametrize("value", [None, "", "  ", "auto", "AUTO", " Auto "])
def test_unset_means_the_next_level_decides(value: object) -> None:
    assert parse_duration(value) is None and is_unset(value)


@pytest.mark.parametrize(
    ("value", "expected"), [(0, 0.0), (1, 1.0), (2.5, 2.5), ("1.5", 1.5), (" 30 ", 30.0)]
)
def test_numbers_are_taken_as_written(value: object, expected: float) -> None:
    assert parse_duration(value) == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("fast", "not_a_number"),
        (True, "not_a_number"),
        ([1], "not_a_number"),
        (math.nan, "not_finite"),
        (math.inf, "not_finite"),
        ("inf", "not_finite"),
        (-1, "negative"),
        ("-0.5", "negative"),
    ],
)
def test_anything_else_says_what_is_wrong(value: object, reason: str) -> None:
    with pytest.raises(DurationError) as info:
        parse_duration(value)
    assert info.value.reason == reason


def test_the_options() -> None:
    with pytest.raises(DurationError, match="not_a_number"):
        parse_duration("5", strings=False)  # a Python API takes numbers only
    with pytest.raises(DurationError, match="not_a_number"):
        parse_duration("auto", unset=("",))  # where "auto" means nothing
    with pytest.raises(DurationError, match="zero"):
        parse_duration(0, zero=False)
    with pytest.raises(DurationError, match="not_whole"):
        parse_duration(1.5, whole=True)
    assert parse_duration("500", whole=True) == 500


@pytest.mark.parametrize("value", [None, 0, -1, math.nan, math.inf])
def test_the_lenient_rule_never_means_fire_at_once(value: object) -> None:
    assert positive_or_none(value) is None
    assert positive_or_none(0.25) == 0.25
    with pytest.raises(DurationError):
        positive_or_none("1")


@pytest.mark.parametrize("value", [0, -1, math.nan, "4", None, True])
def test_api_arguments_that_must_be_positive(value: object) -> None:
    with pytest.raises(ValueError, match="probe timeout must be a positive number of seconds"):
        require_positive_seconds(value, "probe timeout")
    assert require_positive_seconds(4, "probe timeout") == 4.0
