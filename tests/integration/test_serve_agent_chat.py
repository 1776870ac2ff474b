"""An agent-chat app over `firstgate serve` streams as Dify's agent apps do:
`agent_thought` for each round (once with the tools it asked for, again with
their results), `message_file` for the files a tool made, `agent_message`
for the answer's text, then `message_end`; a blocking request is Dify's
`invalid_param`. Real sockets: a serve process, a scripted fake model that
calls tools, the real built-in `time` tool and a plugin tool through the fake
plugin daemon; both pinned client SDKs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import yaml
from firstgate.runtime import RunOptions, RunResources, load_workflow
from firstgate.runtime.settings import RuntimeSettings
from firstgate.serve.agent_chat import AgentChatReply
from firstgate.store import open_store

from tests.fakes import llm_server as fake
from tests.fakes import model_answers as ma
from tests.fakes.plugin_daemon import FakePluginDaemon
from tests.serve_support import Server, run_sdk, serve

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
KEY = "agent-key-0123456789"
STEM = "tools_agent"
QUERY = "What time is it, and the files?"


def _app() -> dict[str, Any]:
    """The corpus agent, with a second (plugin) tool that makes files."""
    app = yaml.safe_load((CORPUS / "easy_agent_chat.yml").read_text())
    tools = app["model_config"]["agent_mode"]["tools"]
    tools[1] = {
        "enabled": True,
        "provider_id": "acme/files/files",
        "provider_name": "acme/files/files",
        "provider_type": "builtin",
        "tool_label": "Everything",
        "tool_name": "everything",
        "tool_parameters": {},
    }
    app["model_config"]["suggested_questions_after_answer"] = {"enabled": True}
    app["model_config"]["file_upload"]["image"]["enabled"] = True
    app["model_config"]["file_upload"]["image"]["detail"] = "low"
    return app


def _model() -> fake.Scenario:
    """Round 1 calls both tools; round 2, with their results, answers."""
    return ma.script(
        [
            # `GET /messages/{id}/suggested`: the app's model predicts the next questions.
            (ma.mentions("questions:"), ma.answer('Next: ["And in Tokyo?", "What date?"]')),
            (
                ma.has_tool_results(0),
                ma.answer(
                    "Let me look. ",
                    [
                        ma.Call("current_time", {"timezone": "UTC"}, id="c1"),
                        ma.Call("everything", {}, id="c2"),
                    ],
                ),
            ),
            (ma.has_tool_results(2), ma.answer("It is now; two files came back.")),
        ]
    )


@pytest.fixture(scope="module")
def model() -> Iterator[fake.FakeLLMServer]:
    with fake.FakeLLMServer(_model()) as running:
        yield running


@pytest.fixture(scope="module")
def server(model: fake.FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("serve-agent-chat")
    apps = tmp / "apps"
    apps.mkdir()
    (apps / f"{STEM}.yml").write_text(yaml.safe_dump(_app()))
    with FakePluginDaemon() as daemon:
        settings = tmp / "settings.yaml"
        settings.write_text(
            yaml.safe_dump(
                {
                    "providers": {
                        "local": {
                            "kind": "openai-compatible",
                            "base_url": model.base_url,
                            "probe": "off",
                        }
                    },
                    "default": "local",
                    "tools": {
                        "timeout_s": 5,
                        "plugin_daemon": {"base_url": daemon.base_url, "tenant_id": "t1"},
                    },
                }
            )
        )
        extra = ("--models", str(settings))
        with serve(tmp, model.base_url, apps=apps, keys={STEM: KEY}, extra=extra) as s:
            yield s


def _frames(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in response.text.split("\n") if line.startswith("data: ")]


def _post(server: Server, mode: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"inputs": {}, "query": QUERY, "user": "ada", "response_mode": mode}
    return httpx.post(f"{server.url}/v1/chat-messages", json=body, headers=headers, timeout=30)


def test_an_agent_app_streams_thoughts_files_and_agent_messages(server: Server) -> None:
    reply = _post(server, "streaming")
    assert reply.status_code == 200, reply.text
    events = _frames(reply)
    kinds = [e["event"] for e in events]
    # Dify's order: the round's text, its thought with the tools, the tools' files,
    # the thought again with their results; the answer's text and its thought; the end.
    squeezed = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert squeezed == [
        "agent_message", "agent_thought", "message_file", "agent_thought",
        "agent_message", "agent_thought", "message_end",
    ], kinds  # fmt: skip
    assert not {"message", "workflow_started", "node_finished", "agent_log"} & set(kinds)
    answer = "".join(e["answer"] for e in events if e["event"] == "agent_message")
    assert answer == "Let me look. It is now; two files came back."
    first, again, last = [e for e in events if e["event"] == "agent_thought"]
    assert first["id"] == again["id"] != last["id"]
    assert (first["position"], again["position"], last["position"]) == (1, 1, 2)
    assert first["thought"] == "Let me look. "
    assert first["tool"] == "current_time;everything"
    assert json.loads(first["tool_input"]) == {
        "current_time": {"timezone": "UTC"},
        "everything": {},
    }
    assert first["observation"] == "" and first["message_files"] == []
    observation = json.loads(again["observation"])
    assert set(observation) == {"current_time", "everything"}
    assert "Hello world" in observation["everything"]
    assert first["tool_labels"]["current_time"] == {
        "en_US": "current_time",
        "zh_Hans": "current_time",
    }
    files = [e for e in events if e["event"] == "message_file"]
    assert [f["type"] for f in files] == ["image", "document"]
    assert all(f["belongs_to"] == "assistant" and f["url"] for f in files)
    assert again["message_files"] == [f["id"] for f in files]
    assert last["thought"] == "It is now; two files came back." and last["tool"] == ""
    end = events[-1]
    assert end["metadata"]["usage"]["total_tokens"] > 0
    ids = {(e["conversation_id"], e["message_id"], e["task_id"]) for e in events}
    assert len(ids) == 1 and all(ids.pop())
    assert all(isinstance(e["created_at"], int) and e["created_at"] > 0 for e in events)


def test_a_blocking_request_to_an_agent_app_is_difys_invalid_param(server: Server) -> None:
    reply = _post(server, "blocking")
    assert reply.status_code == 400
    doc = reply.json()
    assert doc["code"] == "invalid_param" and "blocking" in doc["message"]


def test_the_typed_sdk_reads_the_agent_stream(server: Server) -> None:
    seen = run_sdk("dify-client-python", "typed_client.py", "agent_chat", server.url, KEY)
    assert seen["answer"] == "Let me look. It is now; two files came back."
    (p1, tools, _, none), (p1b, _, observed, files), (p2, final, _, _) = seen["thoughts"]
    assert (p1, p1b, p2) == (1, 1, 2) and tools == "current_time;everything" and none == []
    assert observed and len(files) == 2 and final == ""
    assert seen["files"] == [["image", "assistant"], ["document", "assistant"]]
    assert seen["kinds"][-1] == "message_end"
    assert seen["blocking"] == {"status": 400, "code": "invalid_param"}


def test_the_official_sdk_reads_the_agent_stream(server: Server) -> None:
    seen = run_sdk("dify-client", "official_client.py", "agent_chat", server.url, KEY)
    events = seen["events"]
    assert {e["event"] for e in events} == {
        "agent_message", "agent_thought", "message_file", "message_end",
    }  # fmt: skip
    answer = "".join(e["answer"] for e in events if e["event"] == "agent_message")
    assert answer == "Let me look. It is now; two files came back."
    assert seen["blocking"] == {"status": 400, "code": "invalid_param"}


def test_suggested_questions_after_an_agents_answer(
    server: Server, model: fake.FakeLLMServer
) -> None:
    end = _frames(_post(server, "streaming"))[-1]
    headers = {"Authorization": f"Bearer {KEY}"}
    reply = httpx.get(
        f"{server.url}/v1/messages/{end['message_id']}/suggested",
        params={"user": "ada"},
        headers=headers,
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"result": "success", "data": ["And in Tokyo?", "What date?"]}
    (asked,) = [r.json() for r in model.requests if "questions:" in r.body.decode()]
    (message,) = asked["messages"]  # Dify's shape: one user prompt, no tools, no sampling
    assert message["role"] == "user" and "tools" not in asked
    assert message["content"].startswith(f"Human: {QUERY}\nAssistant: Let me look. It is now")
    assert asked["temperature"] == 0 and asked["max_tokens"] == 256
    typed = run_sdk("dify-client-python", "typed_client.py", "agent_suggested", server.url, KEY)
    assert typed == ["And in Tokyo?", "What date?"]


PNG = b"\x89PNG\r\n\x1a\n" + b"a tiny picture"


def test_an_agent_apps_images_go_to_its_model_with_the_query(
    server: Server, model: fake.FakeLLMServer
) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    upload = httpx.post(
        f"{server.url}/v1/files/upload",
        files={"file": ("clock.png", PNG, "image/png")},
        data={"user": "ada"},
        headers=headers,
        timeout=30,
    )
    assert upload.status_code == 201, upload.text
    body = {
        "inputs": {},
        "query": "Which clock is this?",
        "user": "ada",
        "response_mode": "streaming",
        "files": [
            {
                "type": "image",
                "transfer_method": "local_file",
                "upload_file_id": upload.json()["id"],
            },
            {"type": "image", "transfer_method": "remote_url", "url": "https://example.com/c.png"},
        ],
    }
    before = len(model.requests)
    reply = httpx.post(f"{server.url}/v1/chat-messages", json=body, headers=headers, timeout=30)
    assert reply.status_code == 200, reply.text
    assert _frames(reply)[-1]["event"] == "message_end"
    rounds = [r.json() for r in model.requests[before:] if r.method == "POST"]
    assert len(rounds) == 2  # the tools' round and the answer's
    for asked in rounds:
        query = [m for m in asked["messages"] if m["role"] == "user"][-1]
        text, local, remote = query["content"]
        assert text == {"type": "text", "text": "Which clock is this?"}
        assert local["image_url"]["url"].startswith("data:image/png;base64,")
        assert remote["image_url"] == {"url": "https://example.com/c.png", "detail": "low"}


def test_a_react_agents_rounds_are_thoughts_too(tmp_path: Path) -> None:
    """The same translation over a ReAct agent's events (no server needed)."""
    raw = yaml.safe_load((CORPUS / "easy_agent_chat.yml").read_text())
    raw["model_config"]["agent_mode"]["strategy"] = "react"
    action = '{"action": "current_time", "action_input": {"timezone": "UTC"}}'
    final = '{"action": "Final Answer", "action_input": "Noon in UTC."}'
    scenario = ma.script(
        [
            (ma.mentions("Observation:"), ma.answer(f"Thought: I know\nAction: {final}")),
            (ma.mentions("time"), ma.answer(f"Thought: check the clock\nAction: {action}")),
        ]
    )
    with fake.FakeLLMServer([scenario]) as model:
        settings = RuntimeSettings.model_validate(
            {
                "providers": {
                    "m": {"kind": "openai-compatible", "base_url": model.base_url, "probe": "off"}
                },
                "default": "m",
            }
        )
        store = open_store(tmp_path / "state.db")
        try:
            with RunResources.open(settings, store=store, loader=load_workflow) as resources:
                run = load_workflow(raw, settings=settings).run(
                    {}, RunOptions(query="What time is it?"), resources
                )
                events = [e.to_dict() for e in run]
        finally:
            store.close()
    reply = AgentChatReply(SimpleNamespace(task_id="t1"))  # type: ignore[arg-type]
    made = [m for e in events for m in reply.translate(json.loads(json.dumps(e)))]
    thoughts = [m for m in made if m["event"] == "agent_thought"]
    first, again, last = thoughts
    assert first["tool"] == "current_time" and json.loads(first["tool_input"]) == {
        "current_time": {"timezone": "UTC"}
    }
    assert "check the clock" in first["thought"] and first["observation"] == ""
    assert again["id"] == first["id"] and "current_time" in json.loads(again["observation"])
    assert last["position"] == 2 and last["tool"] == ""
    answer = "".join(m["answer"] for m in made if m["event"] == "agent_message")
    assert answer == "Noon in UTC." and made[-1]["event"] == "message_end"
    # Another reader of the same stream (a resumed one) sees the same thought ids.
    again_reader = AgentChatReply(SimpleNamespace(task_id="t1"))  # type: ignore[arg-type]
    seen = [m for e in events for m in again_reader.translate(json.loads(json.dumps(e)))]
    assert [m["id"] for m in seen if m["event"] == "agent_thought"] == [t["id"] for t in thoughts]


def test_an_agent_apps_messages_list_their_thoughts(server: Server) -> None:
    streamed = _frames(_post(server, "streaming"))
    end = streamed[-1]
    headers = {"Authorization": f"Bearer {KEY}"}
    listed = httpx.get(
        f"{server.url}/v1/messages",
        params={"user": "ada", "conversation_id": end["conversation_id"]},
        headers=headers,
        timeout=30,
    ).json()
    (found,) = listed["data"]
    first, last = found["agent_thoughts"]
    live = [e for e in streamed if e["event"] == "agent_thought"]
    # The same thoughts the stream showed: ids, positions, tools, results, files.
    assert [first["id"], last["id"]] == [live[1]["id"], live[2]["id"]]
    for stored, shown in ((first, live[1]), (last, live[2])):
        for key in ("position", "thought", "tool", "tool_input", "observation", "tool_labels"):
            assert stored[key] == shown[key], key
        assert stored["files"] == shown["message_files"]
        assert stored["message_id"] == end["message_id"] and stored["created_at"] > 0
    assert len(first["files"]) == 2 and last["tool"] == ""
    official = run_sdk("dify-client", "official_client.py", "agent_messages", server.url, KEY)
    assert official["positions"] == [1, 2] and official["tools"] == ["current_time;everything", ""]


def test_an_agent_apps_memory_replays_earlier_tool_calls_and_images(
    server: Server, model: fake.FakeLLMServer
) -> None:
    """Dify's agent runner gives the model each earlier turn as it happened: the
    user's images and query, the round that called tools (its tool_calls) and
    each tool's result, then the answer."""
    headers = {"Authorization": f"Bearer {KEY}"}
    upload = httpx.post(
        f"{server.url}/v1/files/upload",
        files={"file": ("clock.png", PNG, "image/png")},
        data={"user": "ada"},
        headers=headers,
        timeout=30,
    )
    picture = {
        "type": "image",
        "transfer_method": "local_file",
        "upload_file_id": upload.json()["id"],
    }
    first = {
        "inputs": {}, "query": "Which clock is this?", "user": "ada",
        "response_mode": "streaming", "files": [picture],
    }  # fmt: skip
    reply = httpx.post(f"{server.url}/v1/chat-messages", json=first, headers=headers, timeout=30)
    end = _frames(reply)[-1]
    assert end["event"] == "message_end", reply.text
    before = len(model.requests)
    second = {
        "inputs": {}, "query": "And now?", "user": "ada", "response_mode": "streaming",
        "conversation_id": end["conversation_id"],
    }  # fmt: skip
    reply = httpx.post(f"{server.url}/v1/chat-messages", json=second, headers=headers, timeout=30)
    assert _frames(reply)[-1]["event"] == "message_end", reply.text
    asked = next(r.json() for r in model.requests[before:] if r.method == "POST")
    system, user, called, clock, files, answered, query = asked["messages"]
    assert system["role"] == "system" and query == {"role": "user", "content": "And now?"}
    image, text = user["content"]  # the earlier turn's image, then its query
    assert text == {"type": "text", "text": "Which clock is this?"}
    assert image["image_url"]["url"].startswith("data:image/png;base64,")
    assert image["image_url"]["detail"] == "low"
    assert called["role"] == "assistant" and called["content"] == "Let me look. "
    calls = called["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["current_time", "everything"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"timezone": "UTC"}
    assert (clock["role"], clock["name"], clock["tool_call_id"]) == (
        "tool", "current_time", calls[0]["id"],
    )  # fmt: skip
    assert clock["content"][:2] == "20"  # the real time tool's date
    assert files["role"] == "tool" and files["tool_call_id"] == calls[1]["id"]
    assert answered == {"role": "assistant", "content": "It is now; two files came back."}
