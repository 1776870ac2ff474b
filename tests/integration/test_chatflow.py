"""Chatflows on a real SQLite store and the raw-socket fake model: conversation
variables persist per conversation, memory sends earlier turns, a failed turn
writes nothing but its message, concurrent turns of one conversation lose no
write, and Dify's system variables hold what Dify gives them."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from firstgate.runtime import RunOptions, RunResources, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute
from firstgate.store import StoreError, open_store
from firstgate.store.base import MESSAGE_ERROR, MESSAGE_NORMAL

from tests.fakes import llm_server as fake
from tests.run_events import final

FLOWS = Path(__file__).resolve().parents[1] / "flows"


def settings(server: fake.FakeLLMServer) -> RuntimeSettings:
    route = ProviderRoute(kind="openai-compatible", base_url=server.base_url, probe="off")
    return RuntimeSettings(providers={"openai": route})


def turn(
    store: Any, server: fake.FakeLLMServer, query: str, conversation: str | None = None, **kw: Any
) -> list[ev.Event]:
    workflow = load_workflow(FLOWS / "chat_counter.yml")
    options = RunOptions(query=query, conversation_id=conversation, **kw)
    with RunResources.open(settings(server), store=store) as resources:
        return list(workflow.run({}, options, resources))


def answer_of(events: list[ev.Event]) -> str:
    end = events[-1]
    assert isinstance(end, ev.MessageEnd), end
    return end.answer


def test_a_second_turn_sees_what_the_first_wrote(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state.db")
    with fake.FakeLLMServer(fake.tokens(["ok"])) as server:
        first = turn(store, server, "cats")
        conversation = first[0].run.conversation_id
        assert conversation
        second = turn(store, server, "dogs", conversation)
        other = turn(store, server, "birds")  # a new conversation starts from the defaults
    assert answer_of(first) == "#1 ok (dialogue 0, files )"
    assert answer_of(second) == "#2 ok (dialogue 1, files )"
    assert answer_of(other) == "#1 ok (dialogue 0, files )"
    assert second[0].run.conversation_id == conversation
    assert other[0].run.conversation_id != conversation
    assert store.variables(conversation)["topics"].value == ["cats", "dogs"]
    assert store.variables(conversation)["count"].value == 2
    messages = store.messages(conversation)
    assert [(m.query, m.status) for m in messages] == [
        ("cats", MESSAGE_NORMAL),
        ("dogs", MESSAGE_NORMAL),
    ]
    assert messages[1].id == second[0].run.message_id
    # The system prompt of the second turn saw the first turn's topic.
    system = server.requests[1].json()["messages"][0]
    assert system == {"role": "system", "content": 'You count. Topics so far: ["cats", "dogs"]'}


def test_memory_sends_the_last_turns_of_the_window(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state.db")
    replies = [fake.tokens([f"a{n}"]) for n in range(1, 5)]
    with fake.FakeLLMServer(replies) as server:
        conversation = turn(store, server, "q1")[0].run.conversation_id
        for query in ("q2", "q3", "q4"):
            turn(store, server, query, conversation)
        bodies = [request.json()["messages"] for request in server.requests]
    assert [m["role"] for m in bodies[0]] == ["system", "user"]
    assert bodies[0][-1] == {"role": "user", "content": "q1"}
    # Window size 2: the fourth turn sees turns 2 and 3, then its own query.
    assert [(m["role"], m["content"]) for m in bodies[3][1:]] == [
        ("user", "q2"),
        ("assistant", "#2 a2 (dialogue 1, files )"),
        ("user", "q3"),
        ("assistant", "#3 a3 (dialogue 2, files )"),
        ("user", "q4"),
    ]


def test_a_failed_turn_writes_no_variable_and_is_not_remembered(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state.db")
    scenarios = [
        fake.tokens(["fine"]),
        fake.http_error(400, {"error": {"message": "bad"}}),
        fake.tokens(["fine again"]),
    ]
    with fake.FakeLLMServer(scenarios) as server:
        conversation = turn(store, server, "one")[0].run.conversation_id
        failed = turn(store, server, "two", conversation)
        third = turn(store, server, "three", conversation)
        history = server.requests[2].json()["messages"]
    assert isinstance(final(failed), ev.WorkflowFailed)
    assert isinstance(failed[-1], ev.ErrorEvent)
    assert failed[-1].message.startswith("Run failed: ")
    # The assigner ran in the failed turn (count 2 in that run), but nothing of it was kept.
    assert answer_of(third) == "#2 fine again (dialogue 1, files )"
    assert store.variables(conversation)["topics"].value == ["one", "three"]
    assert [(m.query, m.status) for m in store.messages(conversation)] == [
        ("one", MESSAGE_NORMAL),
        ("two", MESSAGE_ERROR),
        ("three", MESSAGE_NORMAL),
    ]
    assert "two" not in json.dumps(history)  # the failed turn is not in the memory
    run = store.run(final(failed).run.workflow_run_id)
    assert run is not None and run.status == "failed"
    assert [n.status for n in run.nodes] == ["succeeded", "succeeded", "failed"]


def test_concurrent_turns_of_one_conversation_lose_no_write(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = open_store(path)
    with fake.FakeLLMServer(fake.tokens(["x", "y"], interval=0.01)) as server:
        conversation = turn(store, server, "start")[0].run.conversation_id
        errors: list[BaseException] = []

        def chat(worker: int) -> None:
            own = open_store(path)  # each worker its own connection, as separate processes would
            try:
                for n in range(3):
                    events = turn(own, server, f"w{worker}-{n}", conversation, turn_wait_s=120)
                    assert isinstance(final(events), ev.WorkflowSucceeded)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                own.close()

        threads = [threading.Thread(target=chat, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
    assert not errors, errors
    assert store.variables(conversation)["count"].value == 13
    assert len(store.variables(conversation)["topics"].value) == 13
    assert len(store.messages(conversation)) == 13


def test_a_conversation_of_another_user_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state.db")
    with fake.FakeLLMServer(fake.tokens(["ok"])) as server:
        conversation = turn(store, server, "hi", user_id="alice")[0].run.conversation_id
        with pytest.raises(StoreError) as refused:
            turn(store, server, "hi", conversation, user_id="mallory")
    assert refused.value.message_key == "errors.store.foreignConversation"


def test_system_variables_of_a_chat_turn(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state.db")
    workflow = load_workflow(FLOWS / "system_variables.yml")
    with RunResources.open(store=store) as resources:
        first = list(workflow.run({}, RunOptions(query="hi there", user_id="u-42"), resources))
        conversation = first[0].run.conversation_id
        options = RunOptions(query="again", conversation_id=conversation, user_id="u-42")
        second = list(workflow.run({}, options, resources))
    info = second[0].run
    lines = dict(line.split("=", 1) for line in answer_of(second).splitlines())
    assert lines == {
        "query": "again",
        "conversation_id": conversation,
        "dialogue_count": "1",
        "user_id": "u-42",
        "app_id": info.app_id,
        "workflow_id": info.workflow_id,
        "workflow_run_id": info.workflow_run_id,
        "files": "",
        "older_query": "again",
    }
    assert info.app_id == first[0].run.app_id and info.workflow_id == workflow.workflow_id
    assert info.workflow_run_id != first[0].run.workflow_run_id


def test_a_chat_turn_without_a_store_is_a_conversation_of_one_turn() -> None:
    workflow = load_workflow(FLOWS / "system_variables.yml")
    events = list(workflow.run({}, RunOptions(query="solo")))
    assert "dialogue_count=0" in answer_of(events)
    assert events[0].run.conversation_id


def test_files_go_into_sys_files_checked_against_the_apps_upload_rules(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state.db")
    doc = tmp_path / "notes.txt"
    doc.write_text("hello")
    with fake.FakeLLMServer(fake.tokens(["ok"])) as server:
        events = turn(store, server, "read", files=[str(doc)])
        run = store.run(final(events).run.workflow_run_id)
        too_big = tmp_path / "big.txt"
        too_big.write_bytes(b"x" * (1024 * 1024 + 1))  # the app's limit is 1 MB
        with pytest.raises(Exception) as refused:
            turn(store, server, "read", files=[str(too_big)])
        picture = tmp_path / "cat.png"
        picture.write_bytes(b"\x89PNG")
        with pytest.raises(Exception) as wrong_type:
            turn(store, server, "look", files=[str(picture)])
    assert f"files [notes.txt]({doc.resolve().as_uri()})" in answer_of(events)
    assert run is not None and [(f.variable, f.filename, f.size) for f in run.files] == [
        ("sys.files", "notes.txt", 5)
    ]
    assert getattr(refused.value, "message_key", "") == "dsl.input.file"
    assert "sys.files" in str(refused.value) and "1048576" in str(refused.value)
    assert "image" in str(wrong_type.value) and "document" in str(wrong_type.value)


def test_vision_sends_images_with_the_last_user_message(tmp_path: Path) -> None:
    workflow = load_workflow(FLOWS / "look_at_picture.yml")
    picture = tmp_path / "cat.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\nfake")
    with fake.FakeLLMServer(fake.tokens(["a cat"])) as server:
        with_image = list(
            workflow.run(
                {},
                RunOptions(
                    query="what is this?", files=[str(picture), "https://example.com/dog.jpg"]
                ),
                settings=settings(server),
            )
        )
        plain = list(workflow.run({}, RunOptions(query="hello"), settings=settings(server)))
        first, second = (r.json()["messages"] for r in server.requests)
    assert answer_of(with_image) == "a cat"
    assert first[0] == {"role": "system", "content": "Describe pictures."}
    assert first[-1]["role"] == "user"
    text, local, remote = first[-1]["content"]
    assert text == {"type": "text", "text": "what is this?"}
    assert local["image_url"]["detail"] == "low"
    assert local["image_url"]["url"] == "data:image/png;base64,iVBORw0KGgpmYWtl"
    assert remote["image_url"]["url"] == "https://example.com/dog.jpg"
    assert second[-1] == {"role": "user", "content": "hello"}
    assert isinstance(final(plain), ev.WorkflowSucceeded)
    # The node's process data shows the prompt, but not the image's bytes.
    (done,) = [e for e in with_image if isinstance(e, ev.NodeSucceeded) and e.node_id == "eyes"]
    shown = done.process_data["prompts"][-1]["content"][1]["image_url"]["url"]
    assert shown.startswith("data:image/png;base64,<") and "iVBOR" not in shown
