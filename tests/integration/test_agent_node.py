"""The agent node in whole workflows against a fake model server and the real
built-in `time` tool: its rounds, its tools in the request and their results
back to the model, `maximum_iterations`, Dify's `agent_log` events, ReAct,
and what is refused by name when the workflow loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.common.problems import DslError
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.models.routes import RouteError
from firstgate.runtime.settings import load_settings

from tests import model_flows as mf
from tests.fakes import llm_server as fake
from tests.fakes import model_answers as ma
from tests.fakes.plugin_daemon import FakePluginDaemon

NEW_YEAR = {"year": 2024, "month": 1, "day": 1}
OBSERVATION = "January 1, 2024 is Monday."


def flow(data: dict[str, Any]) -> dict[str, Any]:
    return mf.workflow(
        [{"id": "n", "data": data}, mf.end("out", text=["n", "text"], usage=["n", "usage"])],
        [("start", "n", "source"), ("n", "out", "source")],
    )


def run(
    tmp_path: Path, data: dict[str, Any], *scenarios: fake.Scenario
) -> tuple[list[ev.Event], list[dict[str, Any]]]:
    with fake.FakeLLMServer(ma.in_turn(*scenarios)) as srv:
        events = mf.run(tmp_path, flow(data), mf.routes(srv), q="What day was 2024-01-01?")
        bodies = [json.loads(r.body) for r in srv.requests if r.method == "POST"]
    return events, bodies


def logs(events: list[ev.Event]) -> list[tuple[str, str]]:
    return [(e.label, e.status) for e in mf.of(events, ev.AgentLog)]


def test_function_calling_runs_the_tool_and_answers_in_the_next_round(tmp_path: Path) -> None:
    events, bodies = run(
        tmp_path,
        mf.agent_data(),
        ma.answer("Let me check. ", [ma.Call("weekday", NEW_YEAR, id="c1")]),
        ma.answer("It was a Monday."),
    )
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs["text"] == "Let me check. It was a Monday."
    assert done.outputs["usage"]["total_tokens"] > 0
    first, second = bodies
    (tool,) = first["tools"]
    assert tool["function"]["name"] == "weekday"
    assert tool["function"]["description"] == "the weekday of a date"
    assert tool["function"]["parameters"]["required"] == ["year", "month", "day"]
    assert first["messages"][0] == {"role": "system", "content": "Use the tools when they help."}
    assert first["messages"][-1] == {"role": "user", "content": "What day was 2024-01-01?"}
    call, result = second["messages"][-2:]
    assert call["tool_calls"][0]["function"]["name"] == "weekday"
    assert result == {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "weekday",
        "content": OBSERVATION,
    }
    assert logs(events) == [
        ("ROUND 1", "start"),
        ("m Thought", "start"),
        ("m Thought", "success"),
        ("CALL weekday", "start"),
        ("CALL weekday", "success"),
        ("ROUND 1", "success"),
        ("ROUND 2", "start"),
        ("m Thought", "start"),
        ("m Thought", "success"),
        ("ROUND 2", "success"),
    ]


def test_agent_log_events_speak_difys_agent_log(tmp_path: Path) -> None:
    events, _ = run(
        tmp_path,
        mf.agent_data(),
        ma.answer("", [ma.Call("weekday", NEW_YEAR)]),
        ma.answer("Monday."),
    )
    agent_logs = mf.of(events, ev.AgentLog)
    rounds = {e.log_id: e for e in agent_logs if e.label == "ROUND 1"}
    (call_done,) = [e for e in agent_logs if e.label == "CALL weekday" and e.status == "success"]
    assert call_done.parent_id in rounds
    wire = call_done.to_dict()
    assert wire["event"] == "agent_log"
    data = wire["data"]
    assert set(data) == {
        "node_execution_id",
        "id",
        "label",
        "parent_id",
        "error",
        "status",
        "data",
        "metadata",
        "node_id",
    }
    assert data["node_id"] == "n" and data["node_execution_id"] == call_done.execution_id
    assert data["data"]["tool_response"] == OBSERVATION
    assert data["data"]["tool_call_input"] == NEW_YEAR
    assert data["metadata"]["elapsed_time"] >= 0


def test_maximum_iterations_ends_with_a_round_offered_no_tools(tmp_path: Path) -> None:
    calling = ma.answer("", [ma.Call("weekday", NEW_YEAR)])
    events, bodies = run(
        tmp_path, mf.agent_data(maximum_iterations=2), calling, ma.answer("Monday, finally.")
    )
    assert len(bodies) == 2
    assert "tools" in bodies[0] and "tools" not in bodies[1]
    assert mf.final(events).outputs["text"] == "Monday, finally."
    assert [label for label, status in logs(events) if status == "start"].count("CALL weekday") == 1


def test_an_unknown_tool_or_bad_arguments_are_observations_not_failures(tmp_path: Path) -> None:
    events, bodies = run(
        tmp_path,
        mf.agent_data(),
        ma.answer(
            "", [ma.Call("teleport", {"to": "Mars"}, id="a"), ma.Call("weekday", {}, id="b")]
        ),
        ma.answer("Sorry."),
    )
    assert isinstance(mf.final(events), ev.WorkflowSucceeded)
    results = [m for m in bodies[1]["messages"] if m["role"] == "tool"]
    assert "no tool named 'teleport'" in results[0]["content"]
    assert results[1]["content"].startswith("tool error:")
    errors = [e for e in mf.of(events, ev.AgentLog) if e.status == "error"]
    assert [e.label for e in errors] == ["CALL teleport", "CALL weekday"]


def test_react_reads_an_action_then_the_final_answer(tmp_path: Path) -> None:
    action = {"action": "weekday", "action_input": NEW_YEAR}
    final = {"action": "Final Answer", "action_input": "It was a Monday."}
    events, bodies = run(
        tmp_path,
        mf.agent_data("ReAct"),
        ma.answer(f"Thought: I need the tool.\nAction: {json.dumps(action)}"),
        ma.answer(f"Thought: I know the answer\nAction: {json.dumps(final)}"),
    )
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs["text"] == "It was a Monday."
    first, second = bodies
    assert "tools" not in first and first["stop"] == ["Observation:"]
    assert "weekday" in first["messages"][0]["content"]  # described in the system prompt
    assert f"Observation: {OBSERVATION}" in second["messages"][-1]["content"]


def test_react_takes_a_reply_without_an_action_as_the_answer(tmp_path: Path) -> None:
    events, _ = run(tmp_path, mf.agent_data("ReAct"), ma.answer("Final Answer: Monday"))
    assert mf.final(events).outputs["text"] == "Monday"


def load(tmp_path: Path, data: dict[str, Any]) -> None:
    path = tmp_path / "flow.yml"
    path.write_text(yaml.safe_dump(flow(data)), encoding="utf-8")
    load_workflow(path)


def test_an_unknown_strategy_of_the_official_provider_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(DslError) as caught:
        load(tmp_path, {**mf.agent_data(), "agent_strategy_name": "mcp_sse"})
    assert 'the agent strategy "mcp_sse" of "langgenius/agent/agent" is not built in' in str(
        caught.value
    )


PLUGIN = "someone/agents/agents"


def plugin_data(strategy: str = "deep_think") -> dict[str, Any]:
    return {
        **mf.agent_data(),
        "agent_strategy_provider_name": PLUGIN,
        "agent_strategy_name": strategy,
    }


def test_a_plugin_strategy_without_a_daemon_is_refused_by_name_before_the_run(
    tmp_path: Path,
) -> None:
    with fake.FakeLLMServer(ma.in_turn()) as srv:
        with pytest.raises(RouteError) as caught:
            mf.run(tmp_path, flow(plugin_data()), mf.routes(srv))
        assert srv.requests == []
    assert "n (Agent) runs deep_think (someone/agents/agents) in a plugin" in str(caught.value)
    assert "tools.plugin_daemon" in str(caught.value)


def with_daemon(daemon: FakePluginDaemon) -> dict[str, Any]:
    return {
        "tools": {"timeout_s": 5, "plugin_daemon": {"base_url": daemon.base_url, "tenant_id": "t1"}}
    }


def test_a_plugin_strategy_is_dispatched_to_the_daemon(tmp_path: Path) -> None:
    with FakePluginDaemon() as daemon:
        events = mf.run(tmp_path, flow(plugin_data()), with_daemon(daemon), q="Why?")
        (request,) = daemon.requests
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs["text"] == "Answer to Why?"
    assert request["path"] == "/plugin/t1/dispatch/agent_strategy/invoke"
    assert request["headers"]["X-Plugin-ID"] == "someone/agents"
    data = request["body"]["data"]
    assert (data["agent_strategy_provider"], data["agent_strategy"]) == ("agents", "deep_think")
    params = data["agent_strategy_params"]
    assert params["query"] == "Why?" and params["maximum_iterations"] == 3
    assert params["model"]["model"] == "m" and params["model"]["history_prompt_messages"] == []
    assert params["tools"][0]["tool_name"] == "weekday"
    (node,) = [e for e in mf.of(events, ev.NodeSucceeded) if e.node_id == "n"]
    assert node.outputs["json"] == [{"rounds": 1}]
    assert logs(events) == [("ROUND 1", "start"), ("ROUND 1", "success")]
    (step,) = [e for e in mf.of(events, ev.AgentLog) if e.status == "success"]
    assert step.to_dict()["data"]["data"] == {"thought": "easy"}


def test_a_plugin_strategy_that_fails_reaches_the_error_strategy(tmp_path: Path) -> None:
    data = {**plugin_data("refuse"), "error_strategy": "default-value"}
    data["default_value"] = [{"key": "text", "type": "string", "value": "no answer"}]
    with FakePluginDaemon() as daemon:
        events = mf.run(tmp_path, flow(data), with_daemon(daemon))
    (handled,) = mf.of(events, ev.NodeException)
    message = str(handled.error)
    assert "the agent strategy refuse of someone/agents/agents failed" in message
    assert "the strategy gave up" in message
    assert mf.final(events).outputs["text"] == "no answer"


@pytest.mark.parametrize(
    ("parameters", "needle"),
    [
        (
            {"tools": [{**mf.WEEKDAY_TOOL, "type": "api", "provider_name": "my-api"}]},
            "Dify api tool",
        ),
        ({"maximum_iterations": 0}, "between 1 and 99"),
        ({"model": None}, "no model"),
    ],
    ids=["database-tool", "zero-iterations", "no-model"],
)
def test_bad_agent_parameters_are_refused_at_load(
    tmp_path: Path, parameters: dict[str, Any], needle: str
) -> None:
    with pytest.raises(DslError) as caught:
        load(tmp_path, mf.agent_data(**parameters))
    assert needle in str(caught.value)


def test_the_cli_shows_agent_logs_in_json_and_the_answer_in_the_human_view(
    tmp_path: Path,
) -> None:
    from tests.integration.test_cli import firstgate

    flow_path = tmp_path / "flow.yml"
    flow_path.write_text(yaml.safe_dump(flow(mf.agent_data())), encoding="utf-8")
    scenario = ma.in_turn(ma.answer("", [ma.Call("weekday", NEW_YEAR)]), ma.answer("Monday."))
    with fake.FakeLLMServer(scenario) as srv:
        settings = tmp_path / "settings.yml"
        settings.write_text(yaml.safe_dump(mf.routes(srv)), encoding="utf-8")
        args = ["run", str(flow_path), "--settings", str(settings), "--input", "q=which day?"]
        as_json = firstgate(*args, "--json")
        human = firstgate(*args)
    assert as_json.returncode == 0, as_json.stderr
    lines = [json.loads(line) for line in as_json.stdout.splitlines() if line.strip()]
    labels = [line["data"]["label"] for line in lines if line["event"] == "agent_log"]
    assert labels.count("CALL weekday") == 2  # its start and its end
    assert human.returncode == 0, human.stderr
    assert "Monday." in human.stdout and "Traceback" not in human.stderr


DUCK_TOOL = {
    "enabled": True,
    "provider_name": "duckduckgo",
    "type": "builtin",
    "tool_name": "search",
    "tool_label": "Search",
    "parameters": {"query": {"auto": 1, "value": None}},
    "schemas": [{"name": "query", "type": "string", "required": True, "form": "llm"}],
}


def test_an_old_builtin_agent_tool_runs_as_its_langgenius_plugin(tmp_path: Path) -> None:
    data = mf.agent_data(tools=[DUCK_TOOL])
    with (
        FakePluginDaemon() as daemon,
        fake.FakeLLMServer(
            ma.in_turn(
                ma.answer("", [ma.Call("search", {"query": "rivers"}, id="c1")]),
                ma.answer("Found it."),
            )  # fmt: skip
        ) as srv,
    ):
        settings = {**mf.routes(srv), **with_daemon(daemon)}
        events = mf.run(tmp_path, flow(data), settings, q="rivers?")
        (request,) = daemon.requests
    assert mf.final(events).outputs["text"] == "Found it."
    assert request["headers"]["X-Plugin-ID"] == "langgenius/duckduckgo"
    assert request["body"]["data"]["tool_parameters"] == {"query": "rivers"}
    with pytest.raises(DslError, match="langgenius/duckduckgo/duckduckgo"):
        load_workflow(flow(data), settings=load_settings_text(tmp_path, {"providers": {}}))


def load_settings_text(tmp_path: Path, settings: dict[str, Any]) -> Any:
    path = tmp_path / "bare-settings.yml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return load_settings(path)
