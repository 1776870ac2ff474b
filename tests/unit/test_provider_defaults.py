"""Dify's provider names imply their route's kind and base_url
(`runtime.settings.provider_defaults`): what a route leaves out, the table fills;
what a route writes wins; what neither says is a located load-time problem."""

from __future__ import annotations

from pathlib import Path

import pytest
from firstgate.common.problems import DslError
from firstgate.plugin_daemon_client.protocols import PROTOCOLS
from firstgate.runtime.models.routes import ModelRoutes
from firstgate.runtime.settings import load_settings
from firstgate.runtime.settings.provider_defaults import PROVIDER_DEFAULTS, defaults_for


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(DslError) as info:
        load_settings(path)
    return [problem.render() for problem in info.value.problems]


def needs_kind(kind: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        kind not in PROTOCOLS,
        reason=f"kind {kind!r} is not in the protocol registry on this branch yet; "
        "this test runs once it is registered",
    )


def test_openai_is_a_whole_route_with_its_key_alone(tmp_path: Path) -> None:
    settings = load_settings(
        write(tmp_path, "providers:\n  langgenius/openai/openai: {api_key_env: OPENAI_API_KEY}\n")
    )
    route = settings.providers["langgenius/openai/openai"]
    assert (route.kind, route.base_url) == ("openai-compatible", "https://api.openai.com/v1")
    assert route.api_key_env == "OPENAI_API_KEY"
    # A public API has no status endpoint: no probe unless the route asks for one.
    assert route.probe_kind == "off"
    assert ModelRoutes(settings).route_for("langgenius/openai/openai")[0] == (
        "langgenius/openai/openai"
    )


def test_the_short_name_implies_what_the_full_id_does(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "providers:\n  openai: {api_key_env: K}\n"))
    assert settings.providers["openai"].base_url == "https://api.openai.com/v1"
    # And an export naming the full id is served by it.
    assert ModelRoutes(settings).route_for("langgenius/openai/openai")[0] == "openai"


def test_what_a_route_writes_wins(tmp_path: Path) -> None:
    settings = load_settings(
        write(
            tmp_path,
            "providers:\n"
            "  langgenius/openai/openai: {base_url: 'http://proxy.internal:8080/v1'}\n"
            "  openai: {kind: plugin-daemon, base_url: 'http://d:5002', tenant_id: t}\n",
        )
    )
    proxied = settings.providers["langgenius/openai/openai"]
    assert (proxied.kind, proxied.base_url) == (
        "openai-compatible",
        "http://proxy.internal:8080/v1",
    )
    assert proxied.probe_kind == "auto"  # not the public endpoint: the kind's default
    daemon = settings.providers["openai"]
    assert (daemon.kind, daemon.base_url) == ("plugin-daemon", "http://d:5002")


def test_another_kind_gets_no_implied_base_url(tmp_path: Path) -> None:
    # A daemon route named after OpenAI must not be sent to api.openai.com.
    path = write(tmp_path, "providers:\n  openai: {kind: plugin-daemon, tenant_id: t}\n")
    (line,) = problems(path)
    assert "providers.openai" in line and "base_url is required for kind plugin-daemon" in line


def test_a_route_the_provider_does_not_complete_is_a_located_problem(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "providers:\n  langgenius/openai_api_compatible/openai_api_compatible: {api_key_env: K}\n",
    )
    (line,) = problems(path)
    assert line.startswith(f"{path}.providers.langgenius/openai_api_compatible/")
    assert "base_url is required for kind openai-compatible" in line


def test_an_unknown_provider_still_needs_its_kind(tmp_path: Path) -> None:
    (line,) = problems(write(tmp_path, "providers:\n  acme/llm/llm: {base_url: 'http://h'}\n"))
    assert "providers.acme/llm/llm.kind" in line


def test_another_plugins_full_id_is_not_matched_by_its_short_name() -> None:
    assert defaults_for("acme/openai/openai") is None
    assert defaults_for("openai") is PROVIDER_DEFAULTS["langgenius/openai/openai"]


def test_an_implied_kind_not_registered_yet_is_a_located_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from firstgate.runtime.settings import provider_defaults as table
    from firstgate.runtime.settings.provider_defaults import ProviderDefaults

    monkeypatch.setitem(
        table.PROVIDER_DEFAULTS, "acme/warp/warp", ProviderDefaults("warp", "https://warp.example")
    )
    path = write(tmp_path, "providers:\n  acme/warp/warp: {api_key_env: K}\n")
    (line,) = problems(path)
    assert line.startswith(f"{path}.providers.acme/warp/warp")
    assert "implies kind warp, which this version does not have; set kind and base_url" in line


@pytest.mark.parametrize(
    ("name", "kind", "base_url", "probe"),
    [
        pytest.param(
            "langgenius/anthropic/anthropic",
            "anthropic",
            "https://api.anthropic.com",
            "off",
            marks=needs_kind("anthropic"),
        ),
        pytest.param(
            "langgenius/gemini/google",
            "gemini",
            "https://generativelanguage.googleapis.com",
            "off",
            marks=needs_kind("gemini"),
        ),
        pytest.param(
            "langgenius/ollama/ollama",
            "ollama",
            "http://127.0.0.1:11434",
            "ollama",
            marks=needs_kind("ollama"),
        ),
    ],
)
def test_each_public_provider_is_a_whole_route(
    tmp_path: Path, name: str, kind: str, base_url: str, probe: str
) -> None:
    settings = load_settings(write(tmp_path, f"providers:\n  {name}: {{api_key_env: K}}\n"))
    route = settings.providers[name]
    assert (route.kind, route.base_url, route.probe_kind) == (kind, base_url, probe)


@needs_kind("azure-openai")
def test_azure_needs_its_resource_url(tmp_path: Path) -> None:
    path = write(tmp_path, "providers:\n  langgenius/azure_openai/azure_openai: {api_key_env: K}\n")
    (line,) = problems(path)
    assert "base_url is required for kind azure-openai" in line


@pytest.mark.parametrize("kind", sorted({spec.kind for spec in PROVIDER_DEFAULTS.values()}))
def test_an_unregistered_kind_says_so_registered_ones_load(tmp_path: Path, kind: str) -> None:
    """Until another branch registers the kind, the route fails with the clear
    message; once it is registered the same route loads (no skip needed)."""
    name = next(n for n, spec in PROVIDER_DEFAULTS.items() if spec.kind == kind)
    spec = PROVIDER_DEFAULTS[name]
    url = "" if spec.base_url else ", base_url: 'https://h.example/v1'"
    path = write(tmp_path, f"providers:\n  {name}: {{api_key_env: K{url}}}\n")
    if kind in PROTOCOLS:
        assert load_settings(path).providers[name].kind == kind
    else:
        (line,) = problems(path)
        assert f"implies kind {kind}, which this version does not have" in line
