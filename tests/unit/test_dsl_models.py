"""DSL models: field validation, coercion, legacy spellings."""

from __future__ import annotations

from typing import Any

import pytest
from firstgate.common.problems import NodeRef, problems_from_validation
from firstgate.nodes import llm
from firstgate.nodes.config import DefaultValue, RetryConfig, coerce_default
from pydantic import ValidationError


def llm_data(**extra: Any) -> dict[str, Any]:
    return {
        "type": "llm",
        "title": "L",
        "model": {"provider": "p", "name": "m", "completion_params": {"temperature": 0.5}},
        "prompt_template": [{"role": "user", "text": "hi"}],
        **extra,
    }


def messages(exc: ValidationError) -> list[str]:
    return [str(p) for p in problems_from_validation(exc, NodeRef("n1", "T", "llm"))]


def test_retry_config_bounds_and_coercion() -> None:
    assert (
        RetryConfig.model_validate(
            {"retry_enabled": True, "max_retries": "3", "retry_interval": 100.0}
        ).max_retries
        == 3
    )
    for bad in (11, -1, "three", True, 2.5):
        with pytest.raises(ValidationError) as info:
            RetryConfig.model_validate({"max_retries": bad})
        assert "must be an integer between 0 and 10" in messages(info.value)[0]


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("string", "x", "x"),
        ("string", 3, "3"),
        ("number", "4", 4),
        ("number", "4.5", 4.5),
        ("number", 7, 7),
        ("object", '{"a": 1}', {"a": 1}),
        ("object", {"a": 1}, {"a": 1}),
        ("array[string]", '["a", "b"]', ["a", "b"]),
        ("array[number]", [1, 2.5], [1, 2.5]),
        ("array[object]", [{"a": 1}], [{"a": 1}]),
    ],
)
def test_default_values_are_coerced(kind: str, value: Any, expected: Any) -> None:
    assert coerce_default(kind, value) == expected


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("number", "many"),
        ("number", True),
        ("string", {"a": 1}),
        ("object", "[1]"),
        ("array[string]", [1]),
        ("array[number]", ["1"]),
        ("array[object]", [1]),
    ],
)
def test_default_values_of_the_wrong_type_are_rejected(kind: str, value: Any) -> None:
    with pytest.raises(ValidationError) as info:
        DefaultValue.model_validate({"key": "k", "type": kind, "value": value})
    assert f"value must be of type {kind}" in messages(info.value)[0]


def test_unknown_default_value_type() -> None:
    with pytest.raises(ValidationError) as info:
        DefaultValue.model_validate({"key": "k", "type": "boolean", "value": True})
    assert messages(info.value)[0].startswith(
        'node n1 "T" (llm): type must be one of string, number'
    )


def test_invocation_wins_over_legacy_completion_params_and_both_are_stripped() -> None:
    raw = llm_data(invocation={"first_token_timeout_ms": 5000})
    raw["model"]["completion_params"].update(
        {"first_token_timeout_ms": 100, "idle_timeout_ms": 700}
    )
    data = llm.Data.model_validate(raw)
    assert data.invocation.first_token_timeout_ms == 5000  # invocation wins
    assert (
        data.invocation.idle_timeout_ms == 700
    )  # the legacy key fills what invocation leaves empty
    assert data.model.completion_params == {"temperature": 0.5}
    params, stop = data.model.parameters()
    assert params == {"temperature": 0.5} and stop is None


def test_legacy_gate_key_alone_is_used() -> None:
    raw = llm_data()
    raw["model"]["completion_params"]["first_token_timeout_ms"] = "2500"
    data = llm.Data.model_validate(raw)
    assert data.invocation.first_token_timeout_ms == 2500
    assert data.invocation.budgets().first_token_s == 2.5
    raw["model"]["completion_params"].update(idle_timeout_ms=0, stream_total_timeout_ms=None)
    budgets = llm.Data.model_validate(raw).invocation.budgets()
    assert budgets.idle_s is None and budgets.stream_total_s is None


def test_stop_words_leave_the_parameters() -> None:
    raw = llm_data()
    raw["model"]["completion_params"]["stop"] = ["\n\n"]
    params, stop = llm.Data.model_validate(raw).model.parameters()
    assert stop == ["\n\n"] and "stop" not in params


def test_missing_model_and_bad_role_are_located() -> None:
    raw = llm_data(prompt_template=[{"role": "robot", "text": "x"}])
    del raw["model"]
    with pytest.raises(ValidationError) as info:
        llm.Data.model_validate(raw)
    found = messages(info.value)
    assert 'node n1 "T" (llm): model is required' in found
    assert any("prompt_template[0].role must be one of system, user, assistant" in m for m in found)


def test_editor_keys_are_ignored() -> None:
    data = llm.Data.model_validate(llm_data(selected=True, vision={"enabled": False}, memory=None))
    assert data.title == "L"


def test_completion_mode_prompt_is_one_object() -> None:
    data = llm.Data.model_validate(llm_data(prompt_template={"text": "say hi"}))
    assert [m.text for m in data.messages] == ["say hi"]
