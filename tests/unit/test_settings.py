"""The runtime settings file: its routing keys, its section seam, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from firstgate.common.dsl import DslModel
from firstgate.common.problems import DslError
from firstgate.plugin_daemon_client.protocols import PROTOCOLS
from firstgate.runtime.models.routes import ModelRoutes, RouteError
from firstgate.runtime.settings import RuntimeSettings, load_settings
from firstgate.runtime.settings.providers import ProviderRoute
from pydantic import Field


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(DslError) as info:
        load_settings(path)
    return [problem.render() for problem in info.value.problems]


def test_the_original_models_file_format_loads(tmp_path: Path) -> None:
    settings = load_settings(
        write(
            tmp_path,
            "providers:\n"
            "  a: {kind: openai-compatible, base_url: 'http://h/v1', max_reply_bytes: 4096}\n"
            "  d: {kind: plugin-daemon, base_url: 'http://d:5002', tenant_id: t}\n"
            "default: a\n"
            "breaker: {threshold: 2}\n",
        )
    )
    assert settings.providers["a"].max_reply_bytes == 4096
    assert settings.providers["d"].probe_kind == "off"  # the daemon's protocol says so
    assert settings.providers["a"].probe_kind == "auto"
    assert ModelRoutes(settings).route_for("unknown")[0] == "a"


def test_an_unknown_kind_names_every_kind(tmp_path: Path) -> None:
    (line,) = problems(write(tmp_path, "providers:\n  a: {kind: grpc, base_url: 'http://h'}\n"))
    kinds = ", ".join([*PROTOCOLS, "local"])
    assert kinds.startswith("openai-compatible, plugin-daemon, anthropic, openai-responses")
    assert f"providers.a.kind must be one of {kinds}" in line
    assert line.endswith('got "grpc"')


def test_credentials_in_base_url_are_refused_without_showing_them(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "providers:\n  a: {kind: openai-compatible, base_url: 'https://u:pw-SECRET@h.example/v1'}\n",
    )
    (line,) = problems(path)
    assert "must not contain credentials" in line and "***@h.example" in line
    assert "pw-SECRET" not in line


def test_a_too_large_or_tiny_reply_cap_is_a_located_problem(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "providers:\n  a: {kind: openai-compatible, base_url: 'http://h/v1', max_reply_bytes: 5}\n",
    )
    (line,) = problems(path)
    assert line.startswith(f"{path}.providers.a.max_reply_bytes must be an integer between 1024")


@pytest.mark.parametrize("key", ["x", "abc"])
def test_a_key_too_short_to_redact_fails_before_the_run(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FG_SHORT_KEY", key)
    route = ProviderRoute(
        kind="openai-compatible", base_url="http://h/v1", api_key_env="FG_SHORT_KEY"
    )
    routes = ModelRoutes(RuntimeSettings(providers={"a": route}))
    with pytest.raises(RouteError) as info:
        routes.check(["a"])
    assert info.value.message_key == "cli.models.shortKey"
    assert key not in str(info.value).replace("FG_SHORT_KEY", "")
    monkeypatch.setenv("FG_SHORT_KEY", "abcd")
    routes.check(["a"])


class DemoSection(DslModel):
    """What another engineer's section looks like: one model in its own module."""

    base_url: str = "http://127.0.0.1:8194"
    timeout_s: float = Field(default=30.0, gt=0)


class WithDemoSection(RuntimeSettings):
    demo: DemoSection = Field(default_factory=DemoSection)  # the one line


def test_a_section_is_one_model_and_one_line() -> None:
    settings = WithDemoSection.model_validate(
        {"providers": {"a": {"kind": "local"}}, "demo": {"timeout_s": 5}}
    )
    assert settings.demo.timeout_s == 5 and settings.providers["a"].kind == "local"
    assert WithDemoSection().demo == DemoSection()  # absent: its defaults
