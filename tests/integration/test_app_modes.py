"""Dify's easy app modes (chat, agent-chat, completion) from the corpus exports,
run through the CLI and in process against the raw-socket fake model: the
prompt each model call gets, memory, knowledge and its retriever resources,
keyword moderation on inputs and answers, the agent's tools; and bad
`model_config`s refused with located, named problems."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.connectors.local_index import LocalIndex
from firstgate.runtime import DslError, RunOptions, RunResources, load_workflow
from firstgate.runtime.dsl.app_modes import compile_document
from firstgate.runtime.loader import read_document
from firstgate.runtime.settings import RuntimeSettings
from firstgate.store import open_store

from tests.fakes import llm_server as fake
from tests.fakes.model_answers import Call, answer, has_tool_results, mentions, script
from tests.integration.test_cli import firstgate, lines

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
INPUTS = {"name": "Ada", "season": "winter", "people": 2}


@pytest.fixture
def index(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "winter.md").write_text("In winter the Canary Islands are warm and sunny.\n")
    (docs / "mugs.md").write_text("The blue mug holds 300 ml and survives the dishwasher.\n")
    path = tmp_path / "kb.sqlite"
    built = LocalIndex(path, create=True)
    built.update(docs)
    built.close()
    return path


def settings_doc(server: fake.FakeLLMServer, index: Path | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "providers": {
            "fake": {"kind": "openai-compatible", "base_url": server.base_url, "probe": "off"}
        },
        "default": "fake",
    }
    if index is not None:
        doc["knowledge"] = {
            "datasets": {"6f1c9a": {"kind": "local", "index": str(index), "name": "Guides"}}
        }
    return doc


def settings_of(server: fake.FakeLLMServer, index: Path | None = None) -> RuntimeSettings:
    return RuntimeSettings.model_validate(settings_doc(server, index))


def settings_file(tmp_path: Path, server: fake.FakeLLMServer, index: Path | None = None) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(settings_doc(server, index)))
    return path


def turn(
    workflow: Any, settings: RuntimeSettings, query: str, store: Any, inputs: Any = None
) -> list[dict]:
    given = INPUTS if inputs is None else inputs
    with RunResources.open(settings, store=store, loader=load_workflow) as resources:
        run = workflow.run(given, RunOptions(query=query, conversation_id="c1"), resources)
        return [e.to_dict() for e in run]


def messages(request: fake.RecordedRequest) -> list[dict[str, Any]]:
    return request.json()["messages"]


def answer_of(events: list[dict]) -> str:
    return "".join(e["answer"] for e in events if e["event"] == "message")


# ---- the corpus exports load as the graph Dify's editor would draw


@pytest.mark.parametrize(
    ("name", "mode", "graph_mode"),
    [
        ("easy_chat.yml", "chat", "advanced-chat"),
        ("easy_chat_advanced.yml", "chat", "advanced-chat"),
        ("easy_agent_chat.yml", "agent-chat", "advanced-chat"),
        ("easy_completion.yml", "completion", "workflow"),
    ],
)
def test_easy_exports_load_as_graphs(name: str, mode: str, graph_mode: str) -> None:
    workflow = load_workflow(CORPUS / name)
    assert (workflow.app_mode, workflow.mode) == (mode, graph_mode)
    assert workflow.easy is not None and workflow.easy.mode == mode
    start = workflow.start_node.data
    declared = [v.variable for v in start.variables]  # type: ignore[attr-defined]
    form = read_document(CORPUS / name)["model_config"]["user_input_form"]
    assert declared == [spec["variable"] for item in form for spec in item.values()]


# ---- chat: the prompt, memory, knowledge, retriever resources, moderation


def test_chat_app_prompt_memory_and_retriever_resources(tmp_path: Path, index: Path) -> None:
    server = fake.FakeLLMServer([fake.tokens(["Go ", "to ", "Tenerife."])])
    with server:
        settings = settings_of(server, index)
        workflow = load_workflow(CORPUS / "easy_chat.yml", settings=settings)
        store = open_store(tmp_path / "state.db")
        first = turn(workflow, settings, "Where is it warm in winter?", store)
        second = turn(workflow, settings, "And in summer?", store)
    assert answer_of(first) == answer_of(second) == "Go to Tenerife."
    system, user = messages(server.requests[0])
    # Dify's simple chat prompt: the context block, then the pre-prompt with its inputs.
    assert system["role"] == "system"
    assert (
        "<context>\nIn winter the Canary Islands are warm and sunny.\n</context>"
        in (system["content"])
    )
    assert system["content"].endswith(
        "You are a travel helper for Ada, who travels in winter with 2 people.\n"
    )
    assert system["content"].index("<context>") < system["content"].index("travel helper")
    assert user == {"role": "user", "content": "Where is it warm in winter?"}
    # The second turn: the first turn as memory, then the new query.
    later = messages(server.requests[1])
    assert [m["role"] for m in later] == ["system", "user", "assistant", "user"]
    assert later[1:] == [
        {"role": "user", "content": "Where is it warm in winter?"},
        {"role": "assistant", "content": "Go to Tenerife."},
        {"role": "user", "content": "And in summer?"},
    ]
    assert request_params(server.requests[0])["temperature"] == 0.3
    end = next(e for e in first if e["event"] == "message_end")
    (resource,) = end["metadata"]["retriever_resources"]
    assert resource["dataset_id"] == "6f1c9a" and resource["dataset_name"] == "Guides"
    assert resource["position"] == 1 and "Canary Islands" in resource["content"]
    assert end["metadata"]["usage"]["total_tokens"] > 0


def request_params(request: fake.RecordedRequest) -> dict[str, Any]:
    return request.json()


def test_retriever_resources_are_hidden_when_the_app_does_not_show_them(
    tmp_path: Path, index: Path
) -> None:
    raw = read_document(CORPUS / "easy_chat.yml")
    raw["model_config"]["retriever_resource"] = {"enabled": False}
    server = fake.FakeLLMServer([fake.tokens(["ok"])])
    with server:
        settings = settings_of(server, index)
        events = turn(load_workflow(raw, settings=settings), settings, "winter?", None)
    end = next(e for e in events if e["event"] == "message_end")
    assert end["metadata"]["retriever_resources"] == []


def test_keyword_moderation_answers_with_the_preset_response(tmp_path: Path, index: Path) -> None:
    server = fake.FakeLLMServer([fake.tokens(["You can ", "SMUGGLE", " it."])])
    with server:
        settings = settings_of(server, index)
        workflow = load_workflow(CORPUS / "easy_chat.yml", settings=settings)
        # A keyword in the query (any case): the preset response, no model call.
        refused = turn(workflow, settings, "How do I move CONTRABAND?", None)
        assert answer_of(refused) == "I cannot help with that."
        assert server.requests == []
        # A keyword in the answer: the output's preset response replaces it.
        withheld = turn(workflow, settings, "What may I bring?", None)
        assert answer_of(withheld) == "That answer was withheld."
        assert len(server.requests) == 1
        # An input value counts too (the form's text inputs).
        workflow_inputs = {**INPUTS, "notes": "we smuggle cheese"}
        run = workflow.run(workflow_inputs, RunOptions(query="hello"), settings=settings)
        assert answer_of([e.to_dict() for e in run]) == "I cannot help with that."


def test_completion_model_chat_app_gets_one_text_with_histories(tmp_path: Path) -> None:
    server = fake.FakeLLMServer([fake.tokens(["Welcome."])])
    with server:
        settings = settings_of(server)
        workflow = load_workflow(CORPUS / "easy_chat_advanced.yml", settings=settings)
        store = open_store(tmp_path / "state.db")
        turn(workflow, settings, "Is breakfast included?", store, {})
        turn(workflow, settings, "Until when?", store, {})
    (first,) = messages(server.requests[0])
    assert first == {
        "role": "user",
        "content": "You are a polite concierge for Grand Hotel.\n\nVisitor: "
        "Is breakfast included?\nBot: ",
    }
    (second,) = messages(server.requests[1])
    # The app's own role prefixes, where the text puts the histories.
    assert "Visitor: Is breakfast included?\nBot: Welcome.\n" in second["content"]
    assert second["content"].endswith("Visitor: Until when?\nBot: ")
    assert server.requests[0].json()["stop"] == ["\nVisitor:"]


def test_simple_prompt_on_a_completion_model_in_a_chat_app(tmp_path: Path) -> None:
    raw = read_document(CORPUS / "easy_chat_advanced.yml")
    raw["model_config"].update(prompt_type="simple", pre_prompt="Be brief about {{hotel}}.")
    raw["model_config"]["model"]["completion_params"] = {}
    server = fake.FakeLLMServer([fake.tokens(["Yes."])])
    with server:
        settings = settings_of(server)
        run = load_workflow(raw, settings=settings).run(
            {}, RunOptions(query="Pool?"), settings=settings
        )
        list(run)
    ((message,), body) = messages(server.requests[0]), server.requests[0].json()
    text = message["content"]
    assert text.startswith("Be brief about Grand Hotel.\n")
    assert "<histories>\n\n</histories>" in text
    assert text.endswith("\n\nHuman: Pool?\n\nAssistant: ")
    assert body["stop"] == ["\nHuman:", "</histories>"]


# ---- completion and agent-chat through the CLI


def test_completion_app_on_the_command_line(tmp_path: Path, index: Path) -> None:
    server = fake.FakeLLMServer([fake.tokens(["A sturdy ", "blue mug."])])
    with server:
        settings = settings_file(tmp_path, server, index)
        done = firstgate(
            "run", str(CORPUS / "easy_completion.yml"), "--models", str(settings), "--json",
            "--input", "product=blue mug", "--input", "words=20", "--input", "facts=300 ml",
        )  # fmt: skip
        refused = firstgate(
            "run", str(CORPUS / "easy_completion.yml"), "--models", str(settings),
            "--input", "product=counterfeit watch",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = lines(done.stdout)
    finished = next(e for e in events if e["event"] == "workflow_finished")
    assert finished["data"]["outputs"] == {"text": "A sturdy blue mug."}
    assert "".join(e["data"]["text"] for e in events if e["event"] == "text_chunk") == (
        "A sturdy blue mug."
    )
    (message,) = messages(server.requests[0])
    # A completion app's simple prompt on a chat model: one user message.
    assert message["role"] == "user"
    assert "<context>\nThe blue mug holds 300 ml" in message["content"]
    assert message["content"].endswith(
        "Write a friendly description of blue mug in 20 words.\nFacts: 300 ml\n"
    )
    assert refused.returncode == 0, refused.stderr
    assert "This product cannot be described here." in refused.stdout
    assert len(server.requests) == 1


def test_agent_chat_app_calls_its_tool_on_the_command_line(tmp_path: Path) -> None:
    scenario = script(
        [
            (has_tool_results(0), answer(calls=[Call("current_time", {})])),
            (has_tool_results(1), answer("It is late in Tokyo.")),
        ]
    )
    server = fake.FakeLLMServer([scenario])
    with server:
        settings = settings_file(tmp_path, server)
        done = firstgate(
            "run", str(CORPUS / "easy_agent_chat.yml"), "--models", str(settings), "--json",
            "--query", "What time is it in Tokyo?", "--input", "user_name=Ada",
            "--state", str(tmp_path / "state.db"),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = lines(done.stdout)
    assert answer_of(events) == "It is late in Tokyo."
    assert any(e["event"] == "agent_log" for e in events)
    first = server.requests[0].json()
    assert [t["function"]["name"] for t in first["tools"]] == ["current_time"]
    assert "time for Ada. Use the tools." in json.dumps(first["messages"])
    tool_result = [m for m in server.requests[1].json()["messages"] if m["role"] == "tool"]
    assert tool_result and "-" in tool_result[0]["content"]  # the fixed format's date
    assert next(e for e in events if e["event"] == "message_end")


# ---- bad input


def _broken(**changes: Any) -> dict[str, Any]:
    raw = copy.deepcopy(read_document(CORPUS / "easy_agent_chat.yml"))
    for path, value in changes.items():
        target = raw["model_config"]
        *head, last = path.split("__")
        for key in head:
            target = target[key]
        target[last] = value
    return raw


def _problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(DslError) as caught:
        load_workflow(raw)
    return [str(p) for p in caught.value.problems]


def test_unknown_model_config_keys_are_ignored() -> None:
    raw = _broken(a_future_feature={"enabled": True}, agent_mode__new_knob=3)
    assert load_workflow(raw).app_mode == "agent-chat"


def test_wrong_types_are_located_problems() -> None:
    found = _problems(
        _broken(agent_mode__max_iteration="lots", model__mode="speech", pre_prompt=["x"])
    )
    assert len(found) == 3, found
    assert any(p.startswith("model_config.agent_mode.max_iteration") for p in found), found
    assert any(p.startswith("model_config.model.mode") for p in found), found
    assert any(p.startswith("model_config.pre_prompt") for p in found), found


def test_an_agent_tool_that_cannot_run_here_is_refused_by_name() -> None:
    tool = {
        "enabled": True,
        "provider_type": "api",
        "provider_id": "weather-api-id",
        "provider_name": "weather-api",
        "tool_name": "forecast",
        "tool_parameters": {},
    }
    (problem,) = _problems(_broken(agent_mode__tools=[tool]))
    assert problem.startswith("model_config.agent_mode.tools[0]")
    assert "weather-api" in problem and "tools.api_providers" in problem


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"external_data_tools": [{"enabled": True, "type": "api", "variable": "x"}]},
         "external_data_tools"),
        ({"sensitive_word_avoidance": {"enabled": True, "type": "openai_moderation"}},
         "sensitive_word_avoidance (openai_moderation)"),
        ({"sensitive_word_avoidance": {"enabled": True, "type": "api"}},
         "sensitive_word_avoidance (api)"),
        ({"user_input_form": [{"external_data_tool": {"variable": "x"}}]},
         '"external_data_tool"'),
    ],
)  # fmt: skip
def test_features_that_cannot_run_here_are_refused_by_name(
    changes: dict[str, Any], named: str
) -> None:
    (problem,) = _problems(_broken(**changes))
    assert named in problem and problem.startswith("model_config."), problem


def test_disabled_external_data_tools_and_moderation_load() -> None:
    raw = _broken(
        external_data_tools=[{"enabled": False, "type": "api"}],
        sensitive_word_avoidance={"enabled": False, "type": "api"},
    )
    assert load_workflow(raw).app_mode == "agent-chat"


def test_a_completion_app_with_knowledge_needs_its_query_variable() -> None:
    raw = read_document(CORPUS / "easy_completion.yml")
    raw["model_config"]["dataset_query_variable"] = "nope"
    (problem,) = _problems(raw)
    assert problem.startswith("model_config.dataset_query_variable") and '"nope"' not in problem
    assert "nope" in problem


def test_validate_names_the_problem_in_another_language(tmp_path: Path) -> None:
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(_broken(external_data_tools=[{"type": "api"}])))
    done = firstgate("validate", str(path), "--locale", "de-DE")
    assert done.returncode == 2
    assert "external_data_tools kann hier nicht ausgeführt werden" in done.stderr


def test_only_features_served_elsewhere_are_ignored() -> None:
    # Suggested questions are served (`GET /v1/messages/{id}/suggested`): no warning;
    # speech is not: the loader says it is ignored.
    raw = _broken(
        suggested_questions_after_answer={"enabled": True},
        text_to_speech={"enabled": True},
    )
    easy = load_workflow(raw).easy
    assert easy is not None and easy.ignored == ("text_to_speech",)
    assert easy.features["suggested_questions_after_answer"] == {"enabled": True}


def test_a_react_agent_apps_images_go_with_the_query_every_round(tmp_path: Path) -> None:
    raw = _broken(agent_mode__strategy="react", file_upload__image__enabled=True)
    app = tmp_path / "react_agent.yml"
    app.write_text(yaml.safe_dump(raw))
    picture = tmp_path / "clock.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n" + b"a station clock")
    action = '{"action": "current_time", "action_input": {}}'
    final = '{"action": "Final Answer", "action_input": "A station clock."}'
    scenario = script(
        [
            (mentions("Observation:"), answer(f"Thought: I know\nAction: {final}")),
            (mentions("clock"), answer(f"Thought: look at the time\nAction: {action}")),
        ]
    )
    server = fake.FakeLLMServer([scenario])
    with server:
        done = firstgate(
            "run", str(app), "--models", str(settings_file(tmp_path, server)), "--json",
            "--query", "Which clock is this?", "--file", str(picture),
            "--state", str(tmp_path / "state.db"),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert answer_of(lines(done.stdout)) == "A station clock."
    asked = [r.json() for r in server.requests if r.method == "POST"]
    assert len(asked) == 2
    for body in asked:
        text, image = body["messages"][-1]["content"]
        assert text["text"].startswith("Which clock is this?")
        assert image["image_url"]["url"].startswith("data:image/png;base64,")
        assert image["image_url"]["detail"] == "high"


# ---- a workflow tool the export cannot carry: Dify's agent runs without it

WORKFLOW_TOOL = {
    "enabled": True,
    "provider_type": "workflow",
    "provider_id": "0b5c3e1a-9d2f-4c6e-8f71-2a4d6b8c0e13",
    "provider_name": "order_lookup",
    "tool_name": "order_lookup",
    "tool_label": "Order lookup",
    "tool_parameters": {"order_id": ""},
}
ABSENT = "dsl.app.workflowToolAbsent"


def _with_workflow_tool() -> dict[str, Any]:
    raw = read_document(CORPUS / "easy_agent_chat.yml")
    tools = [t for t in raw["model_config"]["agent_mode"]["tools"] if t.get("enabled")]
    return _broken(agent_mode__tools=[*copy.deepcopy(tools), WORKFLOW_TOOL])


def _agent_tool_names(workflow: Any) -> list[str]:
    agent = workflow.graph.all_nodes["agent"].data
    return [t.tool_name for t in agent.tools]  # type: ignore[attr-defined]


def test_an_undefined_workflow_tool_is_a_warning_and_left_out(tmp_path: Path) -> None:
    workflow = load_workflow(_with_workflow_tool())
    (warning,) = workflow.warnings
    assert warning.message_key == ABSENT and warning.field == "model_config.agent_mode.tools[1]"
    assert "order_lookup" in warning.render() and "tools.workflow_providers" in warning.render()
    assert _agent_tool_names(workflow) == ["current_time"]
    path = tmp_path / "orders_agent.yml"
    path.write_text(yaml.safe_dump(_with_workflow_tool()))
    done = firstgate("validate", str(path), "--locale", "de-DE")
    assert done.returncode == 0, done.stderr
    assert "model_config.agent_mode.tools[1] das Werkzeug order_lookup" in done.stdout


def test_a_workflow_tool_the_settings_define_is_the_agents(tmp_path: Path) -> None:
    settings = RuntimeSettings.model_validate(
        {
            "tools": {
                "workflow_providers": {
                    WORKFLOW_TOOL["provider_id"]: {"file": str(CORPUS / "branches.yml")}
                }
            }
        }
    )
    workflow = load_workflow(_with_workflow_tool(), settings=settings)
    assert workflow.warnings == []
    assert _agent_tool_names(workflow) == ["current_time", "order_lookup"]


def test_a_run_without_the_workflow_tool_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = fake.FakeLLMServer([script([(has_tool_results(0), answer("Order 7 shipped."))])])
    with server:
        settings = settings_of(server)
        workflow = load_workflow(_with_workflow_tool(), settings=settings)
        with caplog.at_level("WARNING"):
            for query in ("Where is order 7?", "And order 8?"):
                events = turn(workflow, settings, query, None, inputs={"user_name": "Ada"})
                assert answer_of(events) == "Order 7 shipped."
    warned = [r for r in caplog.records if "order_lookup" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]
    asked = [r.json() for r in server.requests if r.method == "POST"]
    assert len(asked) == 2
    for body in asked:
        assert [t["function"]["name"] for t in body["tools"]] == ["current_time"]


# ---- an agent app's memory: the earlier turns' rounds, as Dify's agent runner replays them


def test_a_react_agent_remembers_its_earlier_rounds_as_a_scratchpad(tmp_path: Path) -> None:
    raw = _broken(agent_mode__strategy="react")
    action = '{"action": "current_time", "action_input": {"timezone": "UTC"}}'
    final = '{"action": "Final Answer", "action_input": "Noon in UTC."}'
    scenario = script(
        [
            (mentions("And in Tokyo?"), answer('Action: {"action": "Final Answer", "action_input": "9pm."}')),
            (mentions("Observation:"), answer(f"Thought: I know\nAction: {final}")),
            (mentions("time"), answer(f"Thought: check the clock\nAction: {action}")),
        ]
    )  # fmt: skip
    server = fake.FakeLLMServer([scenario])
    store = open_store(tmp_path / "state.db")
    try:
        with server:
            settings = settings_of(server)
            workflow = load_workflow(raw, settings=settings)
            given = {"user_name": "Ada"}
            first = turn(workflow, settings, "What time is it?", store, inputs=given)
            assert answer_of(first) == "Noon in UTC."
            before = len(server.requests)
            second = turn(workflow, settings, "And in Tokyo?", store, inputs=given)
            assert answer_of(second) == "9pm."
            (asked,) = [r.json() for r in server.requests[before:] if r.method == "POST"]
    finally:
        store.close()
    system, user, remembered, query = asked["messages"]
    assert system["role"] == "system" and user == {"role": "user", "content": "What time is it?"}
    assert query["role"] == "user" and query["content"].startswith("And in Tokyo?")
    assert remembered["role"] == "assistant"
    thought, acted, observed, answered = remembered["content"].split("\n\n")
    assert thought == "Thought: check the clock"
    assert json.loads(acted.removeprefix("Action: ")) == {
        "action": "current_time",
        "action_input": {"timezone": "UTC"},
    }
    assert observed.startswith("Observation: 20")  # the real time tool's answer
    assert answered == "Final Answer: Noon in UTC."


def test_a_chatflow_agent_node_remembers_queries_and_answers_only(tmp_path: Path) -> None:
    # Dify's workflow agent node gets the conversation's plain history: the
    # replay of tool calls is the agent app's. The same graph as a chatflow:
    document, _ = compile_document(_broken())
    (agent,) = [n for n in document["workflow"]["graph"]["nodes"] if n["data"]["type"] == "agent"]
    assert agent["data"].pop("replay_rounds") is True
    scenario = script(
        [
            (has_tool_results(0), answer("Checking. ", [Call("current_time", {}, id="c1")])),
            (has_tool_results(1), answer("It is late.")),
        ]
    )
    server = fake.FakeLLMServer([scenario])
    store = open_store(tmp_path / "state.db")
    try:
        with server:
            settings = settings_of(server)
            workflow = load_workflow(document, settings=settings)
            assert workflow.app_mode == "advanced-chat"
            given = {"user_name": "Ada"}
            assert answer_of(turn(workflow, settings, "Time?", store, inputs=given)) == (
                "Checking. It is late."
            )
            before = len(server.requests)
            turn(workflow, settings, "Again?", store, inputs=given)
            asked = next(r.json() for r in server.requests[before:] if r.method == "POST")
    finally:
        store.close()
    roles = [(m["role"], m["content"]) for m in asked["messages"][1:]]
    assert roles == [
        ("user", "Time?"),
        ("assistant", "Checking. It is late."),
        ("user", "Again?"),
    ]


def test_an_earlier_turns_deleted_image_is_left_out_of_the_memory(tmp_path: Path) -> None:
    raw = _broken(file_upload__image__enabled=True)
    app = tmp_path / "clock_agent.yml"
    app.write_text(yaml.safe_dump(raw))
    picture = tmp_path / "clock.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n" + b"a station clock")
    server = fake.FakeLLMServer([script([(has_tool_results(0), answer("A clock."))])])
    with server:
        settings = settings_file(tmp_path, server)
        common = (
            "run", str(app), "--models", str(settings), "--json",
            "--state", str(tmp_path / "state.db"), "--conversation", "c1",
        )  # fmt: skip
        done = firstgate(*common, "--query", "Which clock?", "--file", str(picture))
        assert done.returncode == 0, done.stderr
        kept = firstgate(*common, "--query", "And this one?")
        picture.unlink()
        gone = firstgate(*common, "--query", "Still there?")
    assert kept.returncode == 0 and gone.returncode == 0, gone.stderr
    asked = [r.json() for r in server.requests if r.method == "POST"]
    remembered = [m for m in asked[1]["messages"] if m["role"] == "user"][0]
    assert [p["type"] for p in remembered["content"]] == ["image_url", "text"]
    left = [m for m in asked[2]["messages"] if m["role"] == "user"][0]
    assert left == {"role": "user", "content": "Which clock?"}


def test_without_image_upload_an_earlier_turns_images_stay_out_of_the_memory(
    tmp_path: Path,
) -> None:
    # The app as it is now decides: images turned off since, the earlier turn is
    # its query alone.
    app = tmp_path / "clock_agent.yml"
    app.write_text(yaml.safe_dump(_broken(file_upload__image__enabled=True)))
    picture = tmp_path / "clock.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n" + b"a station clock")
    server = fake.FakeLLMServer([script([(has_tool_results(0), answer("A clock."))])])
    with server:
        common = (
            "run", str(app), "--models", str(settings_file(tmp_path, server)), "--json",
            "--state", str(tmp_path / "state.db"), "--conversation", "c1",
        )  # fmt: skip
        done = firstgate(*common, "--query", "Which clock?", "--file", str(picture))
        assert done.returncode == 0, done.stderr
        app.write_text(yaml.safe_dump(_broken(file_upload__image__enabled=False)))
        again = firstgate(*common, "--query", "And this one?")
    assert again.returncode == 0, again.stderr
    asked = [r.json() for r in server.requests if r.method == "POST"]
    assert len(asked) == 2
    assert [m for m in asked[1]["messages"] if m["role"] == "user"][0] == {
        "role": "user",
        "content": "Which clock?",
    }
