"""Models-file settings of issue 5: every mistake is a located problem that names
the route and the key; the CLI reports it as invalid input (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.runtime import DslError, RouteError, load_workflow
from firstgate.runtime.models.routes import ModelRoutes
from firstgate.runtime.settings import load_settings

from tests.integration.test_cli import firstgate
from tests.integration.test_workflow_fallback import flow_doc, write_yaml

BASE = {"kind": "openai-compatible", "base_url": "http://127.0.0.1:9/v1"}


def problems(tmp_path: Path, providers: dict[str, Any], **top: Any) -> list[str]:
    path = write_yaml(tmp_path / "models.yaml", {"providers": providers, **top})
    with pytest.raises(DslError) as info:
        load_settings(path)
    return [str(p) for p in info.value.problems]


def test_unknown_fallback_route_names_the_route_and_the_key(tmp_path: Path) -> None:
    (message,) = problems(
        tmp_path, {"primary": {**BASE, "fallbacks": ["backup", "nowhere"]}, "backup": BASE}
    )
    assert message.endswith(
        "providers.primary.fallbacks names nowhere, which is not listed under providers"
    )
    assert str(tmp_path / "models.yaml") in message


def test_a_route_may_not_fall_back_to_itself_or_twice(tmp_path: Path) -> None:
    (itself,) = problems(tmp_path, {"a": {**BASE, "fallbacks": ["a"]}})
    assert "providers.a.fallbacks lists a twice (or the route itself)" in itself
    (twice,) = problems(tmp_path, {"a": {**BASE, "fallbacks": ["b", "b"]}, "b": BASE})
    assert "providers.a.fallbacks lists b twice" in twice


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("first_token_timeout_s", "soon", 'must be a number of seconds (0 or more), "auto"'),
        ("first_token_per_1k_s", -1, "must be a number of seconds (0 or more)"),
        ("first_token_ceiling_s", 0, "must be a positive number of seconds, got 0"),
        ("probe", "nvidia", "must be one of auto, llama.cpp-slots"),
        ("probe_timeout_s", -4, "must be a positive number of seconds, got -4"),
        ("swap_attempt_timeout_ms", "fast", 'must be a number of milliseconds, got "fast"'),
        ("swap_total_budget_ms", True, "must be a number of milliseconds, got true"),
    ],
)
def test_bad_route_settings_name_route_and_key(
    tmp_path: Path, key: str, value: Any, expected: str
) -> None:
    (message,) = problems(tmp_path, {"primary": {**BASE, key: value}})
    assert f"providers.primary.{key} {expected}" in message, message


def test_bad_per_target_cap_and_breaker_are_located(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        {"a": {**BASE, "swap_attempt_timeout_ms_by_target": {"b": "x"}}},
        breaker={"threshold": 0, "cooldown_s": "long"},
    )
    assert any(
        "providers.a.swap_attempt_timeout_ms_by_target.b must be a number" in p for p in found
    )
    assert any("breaker.threshold must be an integer between 1 and 1000" in p for p in found)
    assert any("breaker.cooldown_s must be a positive number of seconds" in p for p in found)


def test_good_settings_load_and_fallback_singular_is_accepted(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path / "models.yaml",
        {
            "providers": {
                "a": {
                    **BASE,
                    "fallback": "b",
                    "first_token_timeout_s": "auto",
                    "first_token_per_1k_s": 6,
                    "probe": "vllm",
                    "swap_total_budget_ms": 30000,
                },
                "b": {**BASE, "allow_same_host_fallback": True, "first_token_timeout_s": 0},
            },
            "breaker": {"threshold": 3, "cooldown_s": 30},
        },
    )
    settings = load_settings(path)
    a = settings.providers["a"]
    assert a.fallbacks == ["b"] and a.probe_kind == "vllm"
    assert a.budget_settings() == {"first_token_timeout_s": "auto", "first_token_per_1k_s": 6.0}
    assert [name for name, _ in ModelRoutes(settings).chain_for("a")] == ["a", "b"]
    assert settings.breaker.threshold == 3


def test_unquoted_yaml_off_disables_the_probe(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(
        "providers:\n  a: {kind: openai-compatible, base_url: 'http://h/v1', probe: off}\n",
        encoding="utf-8",
    )
    assert load_settings(path).providers["a"].probe_kind == "off"


def test_a_fallback_routes_missing_key_fails_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FG_BACKUP_KEY", raising=False)
    routes = load_settings(
        write_yaml(
            tmp_path / "models.yaml",
            {
                "providers": {
                    "primary": {**BASE, "fallbacks": ["backup"]},
                    "backup": {**BASE, "api_key_env": "FG_BACKUP_KEY"},
                }
            },
        )
    )
    workflow = load_workflow(flow_doc())
    with pytest.raises(RouteError) as info:
        workflow.run({"query": "hi"}, settings=routes)
    assert info.value.params == {"provider": "primary", "route": "backup", "env": "FG_BACKUP_KEY"}


def test_cli_reports_a_bad_fallback_as_invalid_input(tmp_path: Path) -> None:
    flow = write_yaml(tmp_path / "flow.yml", flow_doc())
    models = tmp_path / "models.yaml"
    models.write_text(
        yaml.safe_dump({"providers": {"primary": {**BASE, "fallbacks": ["ghost"]}}}),
        encoding="utf-8",
    )
    result = firstgate("run", str(flow), "-i", "query=hi", "--models", str(models))
    assert result.returncode == 2
    assert "providers.primary.fallbacks names ghost" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_base_url_without_http_scheme_is_located(tmp_path: Path) -> None:
    (message,) = problems(tmp_path, {"primary": {**BASE, "base_url": "127.0.0.1:8080/v1"}})
    assert "providers.primary" in message and "base_url" in message
    assert "http://" in message and "127.0.0.1:8080/v1" in message
