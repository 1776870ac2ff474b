"""examples/support_triage.yml (classify, extract, answer) through the fake
model servers: in-process and with the CLI, each model call answered by what
the request is (the classifier's, the extractor's, or a reply)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import load_settings

from tests import run_events
from tests.fakes import llm_server as fake
from tests.fakes import model_answers as ma
from tests.integration.test_cli import firstgate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support_triage.yml"
MESSAGE = "Order 4512 arrived broken, the mug is cracked."


def model(category: str) -> fake.Scenario:
    return ma.script(
        [
            (ma.mentions("category_id"), ma.answer(json.dumps({"category_id": category}))),
            (ma.mentions("order_number"), ma.answer('{"order_number": 4512}')),
            (ma.mentions("saying sorry"), ma.answer("Sorry about the mug!", pieces=3)),
            (ma.mentions("friendly reply"), ma.answer("Sorry about the mug!", pieces=3)),
        ]
    )


def settings(tmp_path: Path, server: fake.FakeLLMServer) -> Path:
    path = tmp_path / "settings.yml"
    route = {"kind": "openai-compatible", "base_url": server.base_url, "probe": "off"}
    path.write_text(yaml.safe_dump({"providers": {"local": route}}), encoding="utf-8")
    return path


def run(tmp_path: Path, category: str) -> tuple[list[ev.Event], list[dict[str, Any]]]:
    with fake.FakeLLMServer(model(category)) as srv:
        workflow = load_workflow(EXAMPLE)
        events = list(
            workflow.run({"message": MESSAGE}, settings=load_settings(settings(tmp_path, srv)))
        )
        bodies = [json.loads(r.body) for r in srv.requests]
    return events, bodies


def test_an_order_message_is_classified_extracted_and_answered(tmp_path: Path) -> None:
    events, bodies = run(tmp_path, "order")
    done = run_events.final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {
        "category": "A problem with an order or a delivery",
        "order_number": 4512,
        "extracted": 1,
        "reply": "Sorry about the mug!",
    }
    assert len(bodies) == 3
    assert [b["stream"] for b in bodies] == [False, False, True]
    assert "sorry that order 4512 had a problem" in bodies[2]["messages"][0]["content"]


def test_anything_else_takes_the_other_branch(tmp_path: Path) -> None:
    events, bodies = run(tmp_path, "other")
    done = run_events.final(events)
    assert done.outputs == {"category": "Anything else", "reply": "Sorry about the mug!"}
    assert len(bodies) == 2
    ran = {e.node_id for e in events if isinstance(e, ev.NodeSucceeded)}
    assert "extract" not in ran and "reply_order" not in ran


def test_the_example_runs_from_the_command_line(tmp_path: Path) -> None:
    with fake.FakeLLMServer(model("order")) as srv:
        done = firstgate(
            "run",
            str(EXAMPLE),
            "--settings",
            str(settings(tmp_path, srv)),
            "--input",
            f"message={MESSAGE}",
            "--json",
        )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    finished = run_events.finished_line(lines)
    assert finished["data"]["status"] == "succeeded"
    assert finished["data"]["outputs"]["order_number"] == 4512
