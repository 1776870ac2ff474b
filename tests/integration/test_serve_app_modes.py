"""`firstgate serve` with easy-mode apps (chat, agent-chat, completion), over
real sockets against the echo model process: chat apps on /v1/chat-messages,
completion apps on /v1/completion-messages (blocking, streaming, stop), each
refused on the other's endpoints as Dify refuses them, and /parameters and
/info from the `model_config`."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from firstgate.connectors.local_index import LocalIndex

from tests.serve_support import Server, echo_model, run_sdk, serve

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
KEYS = {
    "easy_chat": "chat-key-0123456789",
    "easy_agent_chat": "agent-key-0123456789",
    "easy_completion": "write-key-0123456789",
    "editor_defaults_chat": "flow-key-0123456789",
}
WITHHELD = "withheld_chat"  # the chat app, its output check flagging every echo
KEYS[WITHHELD] = "withheld-key-0123456789"


@pytest.fixture(scope="module")
def model() -> Iterator[str]:
    with echo_model() as base_url:
        yield base_url


@pytest.fixture(scope="module")
def server(model: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("serve-app-modes")
    apps = tmp / "apps"
    apps.mkdir()
    for stem in KEYS:
        if stem != WITHHELD:
            shutil.copy(CORPUS / f"{stem}.yml", apps / f"{stem}.yml")
    withheld = yaml.safe_load((CORPUS / "easy_chat.yml").read_text())
    moderation = withheld["model_config"]["sensitive_word_avoidance"]["config"]
    moderation["keywords"] = "echo"
    moderation["inputs_config"]["enabled"] = False
    (apps / f"{WITHHELD}.yml").write_text(yaml.safe_dump(withheld))
    docs = tmp / "docs"
    docs.mkdir()
    (docs / "mugs.md").write_text("The blue mug holds 300 ml and survives the dishwasher.\n")
    index = LocalIndex(tmp / "kb.sqlite", create=True)
    index.update(docs)
    index.close()
    settings = tmp / "settings.yaml"
    settings.write_text(
        yaml.safe_dump(
            {
                "providers": {"local": {"kind": "openai-compatible", "base_url": model}},
                "default": "local",
                "knowledge": {
                    "datasets": {"6f1c9a": {"kind": "local", "index": str(tmp / "kb.sqlite")}}
                },
            }
        )
    )
    with serve(tmp, model, apps=apps, keys=KEYS, extra=("--models", str(settings))) as s:
        yield s


def client(server: Server, stem: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {KEYS[stem]}"}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def frames(response: httpx.Response) -> list[dict]:
    found = []
    for block in response.text.split("\n\n"):
        for text in block.split("\n"):  # a chat stream's frames carry an `id:` line first
            if text.startswith("data: "):
                found.append(json.loads(text[6:]))
    return found


def test_info_and_parameters_come_from_the_model_config(server: Server) -> None:
    with client(server, "easy_chat") as chat, client(server, "easy_completion") as writer:
        assert chat.get("/v1/info").json()["mode"] == "chat"
        assert writer.get("/v1/info").json()["mode"] == "completion"
        params = chat.get("/v1/parameters").json()
        assert params["opening_statement"] == "Where would you like to go, {{name}}?"
        assert params["suggested_questions"] == [
            "Where is it warm in winter?",
            "What should I pack?",
        ]
        assert params["retriever_resource"] == {"enabled": True}
        form = params["user_input_form"]
        assert [next(iter(item)) for item in form] == [
            "text-input", "select", "number", "paragraph", "checkbox", "file",
        ]  # fmt: skip
        assert form[1]["select"]["options"] == ["spring", "summer", "autumn", "winter"]
        assert params["file_upload"]["image"]["enabled"] is True
        assert writer.get("/v1/parameters").json()["more_like_this"] == {"enabled": True}


def test_a_chat_app_answers_on_chat_messages(server: Server) -> None:
    body = {
        "inputs": {"name": "Ada", "season": "winter"},
        "query": "Which mug survives the dishwasher?",
        "user": "ada",
        "response_mode": "blocking",
    }
    with client(server, "easy_chat") as chat:
        reply = chat.post("/v1/chat-messages", json=body)
        assert reply.status_code == 200, reply.text
        doc = reply.json()
        assert doc["mode"] == "chat" and doc["conversation_id"]
        assert doc["answer"] == "echo: Which mug survives the dishwasher?"
        (resource,) = doc["metadata"]["retriever_resources"]
        assert "300 ml" in resource["content"] and resource["dataset_id"] == "6f1c9a"
        again = {**body, "query": "Smuggle it?", "conversation_id": doc["conversation_id"]}
        refused = chat.post("/v1/chat-messages", json=again).json()
        assert refused["answer"] == "I cannot help with that."
        wrong = chat.post("/v1/completion-messages", json={"inputs": {}, "user": "ada"})
        assert wrong.status_code == 400 and wrong.json()["code"] == "app_unavailable"


def _chat_body(mode: str, query: str = "Which mug survives the dishwasher?") -> dict:
    inputs = {"name": "Ada", "season": "winter"}
    return {"inputs": inputs, "query": query, "user": "ada", "response_mode": mode}


def test_a_chat_app_streams_only_what_difys_chat_apps_send(server: Server) -> None:
    with client(server, "easy_chat") as chat:
        reply = chat.post("/v1/chat-messages", json=_chat_body("streaming"))
        assert reply.status_code == 200, reply.text
        assert "\nid: " not in "\n" + reply.text  # Dify's chat stream is not numbered
        events = frames(reply)
        # No workflow_started, node_started, node_finished or workflow_finished.
        assert [e["event"] for e in events] == ["message"] * (len(events) - 1) + ["message_end"]
        first = events[0]
        assert set(first) == {
            "event", "conversation_id", "message_id", "created_at", "task_id", "id", "answer",
            "from_variable_selector",
        }  # fmt: skip
        assert first["from_variable_selector"] is None and first["id"] == first["message_id"]
        answer = "".join(e["answer"] for e in events[:-1])
        assert answer == "echo: Which mug survives the dishwasher?"
        end = events[-1]
        assert end["conversation_id"] == first["conversation_id"] and end["id"] == first["id"]
        assert end["metadata"]["usage"]["total_tokens"] > 0
        (resource,) = end["metadata"]["retriever_resources"]
        assert "300 ml" in resource["content"]
        # The next turn of the same conversation streams the same way.
        again = {
            **_chat_body("streaming", "And in spring?"),
            "conversation_id": end["conversation_id"],
        }
        kinds = {e["event"] for e in frames(chat.post("/v1/chat-messages", json=again))}
        assert kinds == {"message", "message_end"}


def test_a_chat_apps_withheld_answer_is_difys_message_replace(server: Server) -> None:
    with client(server, WITHHELD) as chat:
        events = frames(chat.post("/v1/chat-messages", json=_chat_body("streaming")))
        assert [e["event"] for e in events] == ["message_replace", "message_end"]
        replaced = events[0]
        assert replaced["answer"] == "That answer was withheld."
        assert replaced["reason"] == "output_moderation" and replaced["conversation_id"]
        blocking = chat.post("/v1/chat-messages", json=_chat_body("blocking")).json()
        assert blocking["answer"] == "That answer was withheld." and blocking["mode"] == "chat"


def test_a_chat_apps_blocking_reply_is_difys_chat_shape(server: Server) -> None:
    with client(server, "easy_chat") as chat:
        doc = chat.post("/v1/chat-messages", json=_chat_body("blocking")).json()
    assert set(doc) == {
        "event", "task_id", "id", "message_id", "conversation_id", "mode", "answer",
        "metadata", "created_at",
    }  # fmt: skip
    assert doc["event"] == "message" and doc["mode"] == "chat" and doc["id"] == doc["message_id"]
    assert doc["answer"] == "echo: Which mug survives the dishwasher?"
    assert doc["metadata"]["usage"]["total_tokens"] > 0 and doc["created_at"] > 0


def test_a_chatflow_keeps_streaming_its_workflow_and_node_events(server: Server) -> None:
    body = {"inputs": {}, "query": "hello", "user": "ada", "response_mode": "streaming"}
    with client(server, "editor_defaults_chat") as flow:
        reply = flow.post("/v1/chat-messages", json=body)
        assert reply.status_code == 200, reply.text
        assert reply.text.startswith("id: ")  # numbered, so a client can resume it
        kinds = [e["event"] for e in frames(reply)]
    assert kinds[0] == "workflow_started" and "node_started" in kinds and "node_finished" in kinds
    assert kinds[-2:] == ["workflow_finished", "message_end"] and "message" in kinds


def test_both_sdks_read_a_chat_apps_stream(server: Server) -> None:
    key = KEYS["easy_chat"]
    typed = run_sdk("dify-client-python", "typed_client.py", "easy_chat", server.url, key)
    assert typed["kinds"] == ["MessageStreamResponse"] * typed["chunks"] + [
        "MessageEndStreamResponse"
    ]
    assert (
        typed["answer"] == "echo: Which mug survives the dishwasher?"
        and typed["blocking_mode"] == "chat"
    )
    withheld = run_sdk(
        "dify-client-python", "typed_client.py", "easy_chat", server.url, KEYS[WITHHELD]
    )
    assert withheld["kinds"] == ["MessageReplaceStreamResponse", "MessageEndStreamResponse"]
    official = run_sdk("dify-client", "official_client.py", "easy_chat", server.url, key)
    assert {e["event"] for e in official["events"]} == {"message", "message_end"}
    answer = "".join(e["answer"] for e in official["events"] if e["event"] == "message")
    assert (
        answer == "echo: Which mug survives the dishwasher?"
        and official["blocking"]["mode"] == "chat"
    )


def test_an_agent_chat_app_answers_on_chat_messages(server: Server) -> None:
    body = {"inputs": {}, "query": "What time is it?", "user": "ada", "response_mode": "streaming"}
    with client(server, "easy_agent_chat") as agent:
        reply = agent.post("/v1/chat-messages", json=body)
        assert reply.status_code == 200, reply.text
        events = frames(reply)
    # Dify's agent apps stream `agent_message`, never `message` (the full stream:
    # test_serve_agent_chat.py).
    answer = "".join(e["answer"] for e in events if e["event"] == "agent_message")
    assert answer == "echo: What time is it?"
    assert "message" not in {e["event"] for e in events}
    assert [e["event"] for e in events][-2:] == ["agent_thought", "message_end"]


def test_a_completion_app_blocking_and_streaming(server: Server) -> None:
    body = {"inputs": {"product": "blue mug", "words": 20}, "user": "ada"}
    with client(server, "easy_completion") as writer:
        blocking = writer.post(
            "/v1/completion-messages", json={**body, "response_mode": "blocking"}
        )
        assert blocking.status_code == 200, blocking.text
        doc = blocking.json()
        assert set(doc) == {
            "event", "task_id", "id", "message_id", "mode", "answer", "metadata", "created_at",
        }  # fmt: skip
        assert doc["event"] == "message" and doc["mode"] == "completion"
        assert doc["answer"].startswith("echo: ") and "blue mug in 20 words" in doc["answer"]
        assert doc["metadata"]["usage"]["total_tokens"] > 0
        (resource,) = doc["metadata"]["retriever_resources"]
        assert "300 ml" in resource["content"]
        streamed = writer.post(
            "/v1/completion-messages", json={**body, "response_mode": "streaming"}
        )
        events = frames(streamed)
        assert {e["event"] for e in events} == {"message", "message_end"}
        assert "".join(e["answer"] for e in events[:-1]) == doc["answer"]
        assert all(e["message_id"] == events[0]["message_id"] for e in events)
        end = events[-1]
        assert set(end) >= {"event", "task_id", "id", "message_id", "metadata", "files"}
        refused = writer.post(
            "/v1/completion-messages",
            json={**body, "inputs": {"product": "Counterfeit bag"}, "response_mode": "blocking"},
        )
        assert refused.json()["answer"] == "This product cannot be described here."
        for path in ("/v1/chat-messages", "/v1/workflows/run"):
            wrong = writer.post(path, json={**body, "query": "hi"})
            assert wrong.status_code == 400
            assert wrong.json()["code"] in ("not_chat_app", "not_workflow_app")
        missing = writer.post("/v1/completion-messages", json={"inputs": {}, "user": "ada"})
        assert missing.status_code == 400 and missing.json()["code"] == "invalid_param"


def test_a_completion_can_be_stopped(server: Server) -> None:
    body = {
        "inputs": {"product": "[slow] mug"},
        "user": "ada",
        "response_mode": "streaming",
    }
    with client(server, "easy_completion") as writer:
        with writer.stream("POST", "/v1/completion-messages", json=body) as stream:
            lines = stream.iter_lines()
            first = next(json.loads(line[6:]) for line in lines if line.startswith("data: "))
            assert first["event"] == "message"
            started = time.monotonic()
            stop = writer.post(
                f"/v1/completion-messages/{first['task_id']}/stop", json={"user": "ada"}
            )
            assert stop.json() == {"result": "success"}
            rest = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
        assert time.monotonic() - started < 5
        assert rest[-1]["event"] == "message_end"
        with client(server, "easy_chat") as chat:
            wrong = chat.post(
                f"/v1/completion-messages/{first['task_id']}/stop", json={"user": "a"}
            )
            assert wrong.status_code == 400 and wrong.json()["code"] == "app_unavailable"


def test_both_sdks_create_and_stop_completions(server: Server) -> None:
    key = KEYS["easy_completion"]
    typed = run_sdk("dify-client-python", "typed_client.py", "completion", server.url, key)
    assert typed["answer"].startswith("echo: ") and "blue mug in 20 words" in typed["answer"]
    assert typed["tokens"] > 0
    # Stopped after its first chunk: the stream still ends with `message_end`.
    assert typed["streamed"] == "message_end" and typed["chunks"] < 50
    official = run_sdk("dify-client", "official_client.py", "completion", server.url, key)
    assert official["answer"] == typed["answer"]
    assert official["events"][0] == "message" and official["events"][-1] == "message_end"
    assert len(official["events"]) < 50  # 200 words unstopped
