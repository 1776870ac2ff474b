"""A secret the model streams back in pieces is masked whole: in the text events,
the `--json` lines and the terminal, as in the stored answer (each piece used
to be redacted on its own, so three characters at a time went out whole)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from firstgate.runtime import RunOptions, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import load_settings

from tests.fakes import llm_server as fake
from tests.integration.test_cli import firstgate, lines, models_file

SECRET = "tok-live-4f7a9c2e81b3"
SAID = f"The key is {SECRET}, keep it safe."


def in_threes(text: str) -> list[str]:
    return [text[i : i + 3] for i in range(0, len(text), 3)]


def chat_flow() -> dict[str, Any]:
    llm = {
        "type": "llm",
        "title": "L",
        "model": {"provider": "fake", "name": "m", "mode": "chat", "completion_params": {}},
        "prompt_template": [{"role": "user", "text": "{{#sys.query#}}"}],
        "context": {"enabled": False},
    }
    return {
        "kind": "app",
        "version": "0.3.1",
        "app": {"name": "leaky", "mode": "advanced-chat"},
        "workflow": {
            "environment_variables": [{"name": "token", "value_type": "secret", "value": ""}],
            "graph": {
                "nodes": [
                    {"id": "s", "data": {"type": "start", "title": "S", "variables": []}},
                    {"id": "l", "data": llm},
                    {"id": "a", "data": {"type": "answer", "title": "A", "answer": "{{#l.text#}}"}},
                ],
                "edges": [
                    {"source": "s", "target": "l", "sourceHandle": "source"},
                    {"source": "l", "target": "a", "sourceHandle": "source"},
                ],
            },
        },
    }


def test_a_secret_streamed_three_characters_at_a_time_never_goes_out(
    tmp_path: Path, monkeypatch: Any
) -> None:
    flow = tmp_path / "leaky.yml"
    flow.write_text(yaml.safe_dump(chat_flow()), encoding="utf-8")
    server = fake.FakeLLMServer([fake.tokens(in_threes(SAID)) for _ in range(3)])
    with server:
        models = models_file(tmp_path, server, probe="off")
        env = {"FIRSTGATE_ENV_token": SECRET}
        base = ("run", str(flow), "--models", str(models), "--query", "the key?")
        human = firstgate(*base, "--state", str(tmp_path / "a.db"), env=env)
        as_json = firstgate(*base, "--json", "--state", str(tmp_path / "b.db"), env=env)
        monkeypatch.setenv("FIRSTGATE_ENV_token", SECRET)
        events = list(
            load_workflow(flow).run(
                {}, RunOptions(query="the key?"), settings=load_settings(models)
            )
        )
    assert human.returncode == 0, human.stderr
    assert as_json.returncode == 0, as_json.stderr
    shown = "The key is ***, keep it safe."
    assert shown in human.stdout
    streamed = [e for e in lines(as_json.stdout) if e["event"] == "message"]
    assert len(streamed) > 3  # it still streams, piece by piece
    assert "".join(e["answer"] for e in streamed) == shown
    chunks = [e.text for e in events if isinstance(e, ev.TextChunk)]
    assert "".join(chunks) == shown
    for text in (human.stdout + human.stderr, as_json.stdout + as_json.stderr, *chunks):
        assert SECRET not in text
        for piece in (SECRET[:7], SECRET[7:14], SECRET[14:]):
            assert piece not in text  # no part of it, cut off by a chunk boundary
