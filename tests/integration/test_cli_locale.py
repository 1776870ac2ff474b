"""The CLI renders a first-token timeout in the user's language (issue: locales)."""

from __future__ import annotations

from pathlib import Path

import yaml

from firstgate import locales
from tests.fakes import llm_server as fake
from tests.integration.test_cli import firstgate, models_file

FLOW = {
    "version": "0.1.5",
    "kind": "app",
    "app": {"name": "gate", "mode": "workflow"},
    "workflow": {
        "graph": {
            "nodes": [
                {"id": "start", "data": {"type": "start", "title": "Start", "variables": []}},
                {
                    "id": "llm",
                    "data": {
                        "type": "llm",
                        "title": "Ask",
                        "model": {"provider": "fake", "name": "m", "mode": "chat"},
                        "prompt_template": [{"role": "user", "text": "hi"}],
                        "invocation": {"first_token_timeout_ms": 400},
                    },
                },
                {
                    "id": "end",
                    "data": {
                        "type": "end",
                        "title": "End",
                        "outputs": [{"variable": "a", "value_selector": ["llm", "text"]}],
                    },
                },
            ],
            "edges": [
                {"source": "start", "target": "llm", "sourceHandle": "source"},
                {"source": "llm", "target": "end", "sourceHandle": "source"},
            ],
        }
    },
}


def test_first_token_timeout_is_shown_in_german(tmp_path: Path) -> None:
    flow = tmp_path / "flow.yml"
    flow.write_text(yaml.safe_dump(FLOW), encoding="utf-8")
    with fake.FakeLLMServer(fake.pings(0.1, 5)) as server:
        result = firstgate(
            "run", str(flow), "--models", str(models_file(tmp_path, server)), "--locale", "de-DE"
        )
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    german = locales.t("errors.firstTokenTimeout.accepted", "de-DE", budget="0.4", elapsed="")
    english = locales.t("errors.firstTokenTimeout.accepted", "en-US", budget="0.4", elapsed="")
    head = german.split("{{")[0][:30]
    assert german != english
    assert head in result.stdout, result.stdout
    assert english[:30] not in result.stdout
