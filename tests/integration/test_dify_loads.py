"""What Dify loads loads here too, with a warning and Dify's run-time
behaviour: an edge through a handle its node lacks (never taken), a selector
naming a node that does not run first (the value is missing), a bare-string
tool parameter (a template), a whitespace-only LLM message (sent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.runtime import load_workflow
from firstgate.runtime.cli.command import cmd_validate
from firstgate.runtime.execution import events as ev

from tests import model_flows as mf
from tests.fakes import llm_server as fake
from tests.fakes import model_answers as ma


def tpl(node_id: str, template: str, **variables: list[str]) -> dict[str, Any]:
    return {
        "id": node_id,
        "data": {
            "type": "template-transform",
            "title": node_id,
            "template": template,
            "variables": [{"variable": k, "value_selector": v} for k, v in variables.items()],
        },
    }


def validated(tmp_path: Path, doc: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "flow.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    assert cmd_validate(str(path), "en-US") == 0
    return capsys.readouterr().out


def started(events: list[ev.Event]) -> set[str]:
    return {e.node_id for e in events if isinstance(e, ev.NodeStarted)}


def test_an_edge_through_a_missing_handle_is_never_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = mf.workflow(
        [tpl("a", "A"), tpl("gone", "G"), mf.end("out", text=["a", "output"])],
        [("start", "a", "source"), ("a", "out", "source"), ("start", "gone", "deleted-case")],
    )
    [warning] = load_workflow(doc).warnings
    assert warning.message_key == "dsl.warning.edgeHandle" and warning.node.id == "start"
    assert 'handle "deleted-case"' in validated(tmp_path, doc, capsys)
    events = mf.run(tmp_path, doc, {})
    assert mf.final(events).outputs == {"text": "A"}
    assert "gone" not in started(events)


def test_a_selector_to_a_node_that_runs_later_reads_a_missing_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = mf.workflow(
        [
            tpl("a", "[{{ x }}]", x=["b", "output"]),
            tpl("b", "B"),
            mf.end("out", text=["a", "output"]),
        ],
        [("start", "a", "source"), ("a", "b", "source"), ("b", "out", "source")],
    )
    [warning] = load_workflow(doc).warnings
    assert warning.message_key == "dsl.warning.notUpstream" and warning.node.id == "a"
    assert "b.output refers to node b" in validated(tmp_path, doc, capsys)
    assert mf.final(mf.run(tmp_path, doc, {})).outputs == {"text": "[None]"}


def test_a_bare_string_tool_parameter_is_read_as_a_template(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = {
        "id": "n",
        "data": {
            "type": "tool",
            "title": "Weekday",
            "provider_id": "time",
            "provider_type": "builtin",
            "tool_name": "weekday",
            "tool_parameters": {"year": "{{#start.q#}}", "month": "1", "day": "1"},
        },
    }
    doc = mf.workflow([tool, mf.end("out", text=["n", "text"])],
                      [("start", "n", "source"), ("n", "out", "source")])  # fmt: skip
    warnings = load_workflow(doc).warnings
    assert [w.message_key for w in warnings] == ["dsl.warning.bareToolParameter"] * 3
    assert "tool parameter year is a bare string" in validated(tmp_path, doc, capsys)
    events = mf.run(tmp_path, doc, {}, q="2024")
    assert mf.final(events).outputs == {"text": "January 1, 2024 is Monday."}


def test_a_whitespace_only_message_is_sent_as_dify_sends_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    llm = {
        "id": "n",
        "data": {
            "type": "llm",
            "title": "LLM",
            "model": {"provider": "primary", "name": "m", "mode": "chat", "completion_params": {}},
            "prompt_template": [
                {"role": "system", "text": "  \n"},
                {"role": "user", "text": "{{#start.q#}}"},
                {"role": "assistant", "text": ""},
            ],
        },
    }
    doc = mf.workflow([llm, mf.end("out", text=["n", "text"])],
                      [("start", "n", "source"), ("n", "out", "source")])  # fmt: skip
    [warning] = load_workflow(doc).warnings
    assert warning.message_key == "dsl.warning.whitespaceMessage"
    assert "system prompt message holds only whitespace" in validated(tmp_path, doc, capsys)
    with fake.FakeLLMServer(ma.in_turn(ma.answer("ok"))) as srv:
        events = mf.run(tmp_path, doc, mf.routes(srv), q="hi")
        [body] = [json.loads(r.body) for r in srv.requests if r.method == "POST"]
    assert mf.final(events).outputs == {"text": "ok"}
    # the empty message is dropped, the whitespace one sent
    assert body["messages"] == [
        {"role": "system", "content": "  \n"},
        {"role": "user", "content": "hi"},
    ]


def test_a_run_logs_the_warnings_once(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    doc = mf.workflow(
        [tpl("a", "A"), mf.end("out", text=["a", "output"])],
        [("start", "a", "source"), ("a", "out", "source"), ("a", "out", "gone")],
    )
    workflow = load_workflow(doc)
    with caplog.at_level("WARNING", logger="firstgate.workflow"):
        for _ in range(2):
            list(workflow.run({"q": "x"}))
    assert [r.getMessage() for r in caplog.records if "gone" in r.getMessage()] != []
    assert len([r for r in caplog.records if "gone" in r.getMessage()]) == 1
