"""Workflow tools (`provider_type: workflow`): another workflow named in the
runtime settings runs as the tool, with the tool's arguments as its inputs;
outputs, failures, the time bound, stopping, nesting depth, and the refusal
when the settings do not define the provider."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.common.problems import DslError
from firstgate.runtime import RunOptions, RunResources, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.store import open_store
from pydantic import ValidationError

from tests.connect_support import abort_once, chain_flow, node_end, settings
from tests.fakes.http_target import HttpTarget

PROVIDER = "wf-summarize"


def inner_flow(steps: list[tuple[str, str, dict[str, Any]]], outputs: dict[str, list[str]]) -> Any:
    start_variables = [
        {"variable": "topic", "type": "text-input", "label": "topic", "required": True},
        {"variable": "n", "type": "number", "label": "n", "required": False},
    ]
    return chain_flow(steps, outputs, start_variables=start_variables)


def tool_step(provider: str = PROVIDER, **params: Any) -> tuple[str, str, dict[str, Any]]:
    return (
        "call",
        "tool",
        {
            "provider_id": provider,
            "provider_type": "workflow",
            "provider_name": "Summarize",
            "tool_name": "summarize",
            "tool_parameters": params,
        },
    )


@pytest.fixture
def summarize(tmp_path: Path) -> Path:
    inner = inner_flow(
        [("fmt", "template-transform", {
            "template": "About {{ topic }} x {{ n }}",
            "variables": [{"variable": "topic", "value_selector": ["start", "topic"]},
                          {"variable": "n", "value_selector": ["start", "n"]}],
        })],
        {"summary": ["fmt", "output"], "n": ["start", "n"]},
    )  # fmt: skip
    path = tmp_path / "summarize.yml"
    path.write_text(yaml.safe_dump(inner))
    return path


def routes(**providers: Path) -> Any:
    return settings(
        tools={
            "timeout_s": 30,
            "workflow_providers": {
                k.replace("_", "-"): {"file": str(v)} for k, v in providers.items()
            },
        }
    )


def outer(*steps: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return chain_flow(list(steps), {"text": ["call", "text"], "json": ["call", "json"]})


def run(document: dict[str, Any], routes: Any, **inputs: Any) -> list[ev.Event]:
    return list(load_workflow(document, settings=routes).run(inputs, settings=routes))


def test_the_inner_workflow_runs_with_the_arguments_as_inputs(summarize: Path) -> None:
    params = {"topic": {"type": "mixed", "value": "rivers"}, "n": {"type": "constant", "value": 2}}
    events = run(outer(tool_step(**params)), routes(wf_summarize=summarize))
    out = events[-1].outputs
    assert json.loads(out["text"]) == {"summary": "About rivers x 2", "n": 2}
    assert out["json"] == [{"summary": "About rivers x 2", "n": 2}]


def test_the_inner_run_shares_the_outer_resources_and_is_not_recorded_apart(
    summarize: Path, tmp_path: Path
) -> None:
    store = open_store(tmp_path / "state.db")
    recorded: list[str] = []
    record_run = store.record_run
    store.record_run = lambda run: (recorded.append(run.id), record_run(run))[-1]  # type: ignore[method-assign]
    routes_ = routes(wf_summarize=summarize)
    params = {"topic": {"type": "mixed", "value": "lakes"}}
    workflow = load_workflow(outer(tool_step(**params)), settings=routes_)
    with RunResources.open(routes_, store=store, loader=load_workflow) as resources:
        events = list(workflow.run({}, RunOptions(), resources))
    assert json.loads(events[-1].outputs["text"])["summary"] == "About lakes x None"
    assert recorded == [events[-1].run.workflow_run_id]  # the outer run only
    store.close()


def test_without_a_definition_it_is_refused_by_name(summarize: Path) -> None:
    with pytest.raises(DslError) as caught:
        load_workflow(outer(tool_step()))
    message = caught.value.problems[0].render()
    assert "Summarize is a Dify workflow tool" in message
    assert f"tools.workflow_providers.{PROVIDER}" in message
    with pytest.raises(ValidationError, match="no such file"):
        settings(tools={"workflow_providers": {"x": {"file": str(summarize) + ".gone"}}})


def test_an_inner_failure_is_a_tool_error(summarize: Path) -> None:
    events = run(outer(tool_step()), routes(wf_summarize=summarize))  # `topic` is required
    assert node_end(events, "call").error_type == "ToolError"
    assert "the workflow tool wf-summarize failed" in events[-1].error_message
    assert "topic" in events[-1].error_message


@pytest.fixture
def target() -> Iterator[HttpTarget]:
    with HttpTarget() as server:
        yield server


def slow_inner(tmp_path: Path, target: HttpTarget, path: str = "/slow?delay=30") -> Path:
    get = {"method": "get", "url": target.url + path, "headers": "", "params": ""}
    inner = inner_flow(
        [("dl", "http-request", get)], {"body": ["dl", "body"], "files": ["dl", "files"]}
    )
    file = tmp_path / "slow.yml"
    file.write_text(yaml.safe_dump(inner))
    return file


def test_the_time_bound_and_stopping_reach_the_inner_run(
    target: HttpTarget, tmp_path: Path
) -> None:
    inner = slow_inner(tmp_path, target)
    bounded = settings(
        http_request={"allow": ["127.0.0.1"]},
        tools={"timeout_s": 1, "workflow_providers": {PROVIDER: {"file": str(inner)}}},
    )
    started = time.monotonic()
    params = {"topic": {"type": "mixed", "value": "x"}}
    events = run(outer(tool_step(**params)), bounded)
    assert node_end(events, "call").error_type == "ToolTimeoutError"
    assert time.monotonic() - started < 15
    patient = settings(
        http_request={"allow": ["127.0.0.1"]},
        tools={"timeout_s": 60, "workflow_providers": {PROVIDER: {"file": str(inner)}}},
    )
    started_requests = len(target.requests)
    outer_run = load_workflow(outer(tool_step(**params)), settings=patient).run(
        {}, settings=patient
    )
    events = abort_once(outer_run, lambda: len(target.requests) > started_requests)
    assert isinstance(events[-1], ev.WorkflowStopped)
    # the inner run was stopped too: the tool node itself reported back
    assert node_end(events, "call").error_type == "ToolCancelledError"


def test_files_the_inner_workflow_outputs_are_the_tool_files(
    target: HttpTarget, tmp_path: Path
) -> None:
    inner = slow_inner(tmp_path, target, "/file")
    routes_ = settings(
        http_request={"allow": ["127.0.0.1"]},
        files={"dir": str(tmp_path / "files")},
        tools={"workflow_providers": {PROVIDER: {"file": str(inner)}}},
    )
    document = chain_flow(
        [tool_step(topic={"type": "mixed", "value": "x"})],
        {"files": ["call", "files"], "json": ["call", "json"]},
    )
    out = run(document, routes_)[-1].outputs
    assert [f["filename"] for f in out["files"]] == ["pixel.png"]
    assert out["json"] == [{"body": ""}]


def test_workflows_calling_themselves_stop_at_the_depth_limit(tmp_path: Path) -> None:
    path = tmp_path / "loop.yml"
    path.write_text(yaml.safe_dump(inner_flow(
        [tool_step(provider="wf-loop", topic={"type": "mixed", "value": "{{#start.topic#}}"})],
        {"text": ["call", "text"]},
    )))  # fmt: skip
    loop_routes = settings(tools={"workflow_providers": {"wf-loop": {"file": str(path)}}})
    document = outer(tool_step(provider="wf-loop", topic={"type": "mixed", "value": "x"}))
    events = run(document, loop_routes)
    message = events[-1].error_message
    assert "would nest workflows more than 5 deep" in message
    # each level's failure wraps the one below it: five levels ran, no more
    assert message.count("the workflow tool wf-loop failed") == 5


def test_a_chatflow_cannot_be_a_tool(tmp_path: Path) -> None:
    chat = inner_flow([], {})
    chat["app"]["mode"] = "advanced-chat"
    chat["workflow"]["graph"]["nodes"][-1] = {
        "id": "end",
        "data": {"type": "answer", "title": "A", "answer": "hi"},
    }
    path = tmp_path / "chat.yml"
    path.write_text(yaml.safe_dump(chat))
    events = run(outer(tool_step(topic={"type": "mixed", "value": "x"})), routes(wf_summarize=path))
    assert "is a chatflow; only a workflow can be a tool" in events[-1].error_message


def test_an_agent_calls_a_workflow_tool_the_settings_define(
    summarize: Path, tmp_path: Path
) -> None:
    from tests import model_flows as mf
    from tests.fakes import llm_server as fake
    from tests.fakes import model_answers as ma

    tool = {
        "enabled": True,
        "provider_id": PROVIDER,
        "provider_name": "Summarize",
        "type": "workflow",
        "tool_name": "summarize",
        "parameters": {"topic": {"auto": 1, "value": None}},
        "schemas": [{"name": "topic", "type": "string", "required": True, "form": "llm"}],
        "extra": {"description": "a one-line summary of a topic"},
    }
    data = mf.agent_data(tools=[tool])
    flow = mf.workflow(
        [{"id": "n", "data": data}, mf.end("out", text=["n", "text"])],
        [("start", "n", "source"), ("n", "out", "source")],
    )
    with pytest.raises(DslError, match="Summarize is a Dify workflow tool"):
        load_workflow(flow)
    answers = ma.in_turn(
        ma.answer("", [ma.Call("summarize", {"topic": "rivers"}, id="c1")]),
        ma.answer("Rivers, briefly."),
    )
    with fake.FakeLLMServer(answers) as server:
        defined = settings(**mf.routes(server), tools=routes(wf_summarize=summarize).tools)
        events = list(load_workflow(flow, settings=defined).run({"q": "rivers?"}, settings=defined))
        bodies = [json.loads(r.body) for r in server.requests if r.method == "POST"]
    assert events[-1].outputs == {"text": "Rivers, briefly."}, events[-1]
    observation = bodies[1]["messages"][-1]
    assert observation["role"] == "tool"
    # the tool's JSON once: its json message repeats its text and stays out
    assert json.loads(observation["content"]) == {"summary": "About rivers x None", "n": None}


def test_served_apps_load_workflow_tools_the_settings_define(
    summarize: Path, tmp_path: Path
) -> None:
    from firstgate.serve.apps import key_variable, load_directory

    apps = tmp_path / "apps"
    apps.mkdir()
    params = {"topic": {"type": "constant", "value": "lakes"}}
    (apps / "outer.yml").write_text(yaml.safe_dump(outer(tool_step(**params))))
    environ = {key_variable("outer"): "app-key-outer-123"}
    without = load_directory(apps, environ)
    assert not without.apps
    assert without.skipped[0].message_key == "serve.app.notLoaded"
    assert "Summarize is a Dify workflow tool" in without.skipped[0].params["error"]
    defined = routes(wf_summarize=summarize)
    served = load_directory(apps, environ, defined).apps["outer"].workflow
    events = list(served.run({}, settings=defined))
    assert json.loads(events[-1].outputs["text"])["summary"] == "About lakes x None"
