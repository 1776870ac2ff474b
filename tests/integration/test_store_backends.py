"""The store's one interface on both real backends: SQLite files and a real
PostgreSQL server. Each test runs on each backend."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstgate.store import StoreError, TurnResult, UploadRecord, VariableValue, open_store
from firstgate.store.base import (
    MESSAGE_ERROR,
    MESSAGE_NORMAL,
    FileRecord,
    MessageRecord,
    NodeExecutionRecord,
    RunRecord,
    Store,
)
from firstgate.store.postgres import MIGRATIONS as PG_MIGRATIONS
from firstgate.store.postgres import PostgresStore

from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures

APP = "app-1"
USER = "user-1"


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(location: str) -> Iterator[Store]:
    opened = open_store(location)
    yield opened
    opened.close()


def _run(run_id: str, status: str = "succeeded", inputs: dict | None = None) -> RunRecord:
    now = time.time()
    return RunRecord(
        id=run_id, app_id=APP, workflow_id="wf", mode="advanced-chat", user_id=USER,
        status=status, inputs=inputs or {}, outputs={"answer": "a"}, error=None,
        elapsed_time=0.1, total_tokens=3, total_steps=2, exceptions_count=0,
        created_at=now, finished_at=now,
    )  # fmt: skip


def _turn(store: Store, conversation: str, *, user: str = USER, wait: float = 5.0):  # type: ignore[no-untyped-def]
    return store.begin_turn(
        conversation, app_id=APP, user_id=user, mode="advanced-chat",
        lease_seconds=60.0, wait_seconds=wait,
    )  # fmt: skip


def _finish(
    turn, query: str, answer: str, status: str = MESSAGE_NORMAL, **variables: object
) -> str:  # type: ignore[no-untyped-def]
    run_id = f"run-{time.monotonic_ns()}"
    message_id = f"m-{run_id}"
    turn.commit(
        TurnResult(
            run=_run(run_id, "succeeded" if status == MESSAGE_NORMAL else "failed", {"x": query}),
            message=MessageRecord(message_id, query, answer, status, None, 3, time.time()),
            variables={k: VariableValue("string", v) for k, v in variables.items()},
        )
    )
    return message_id


def test_a_turn_sees_what_the_previous_turn_wrote(store: Store) -> None:
    _finish(_turn(store, "c1"), "q1", "a1", topic="cats")
    second = _turn(store, "c1")
    assert not second.state.is_new and second.state.dialogue_count == 1
    assert second.state.variables["topic"] == VariableValue("string", "cats")
    assert [(h.query, h.answer) for h in second.state.history] == [("q1", "a1")]
    second.release()
    _finish(_turn(store, "c1"), "q2", "a2", MESSAGE_ERROR, topic="dogs")
    assert store.variables("c1")["topic"].value == "cats"  # a failed turn writes no variable
    messages = store.messages("c1")
    assert [(m.query, m.status, m.inputs) for m in messages] == [
        ("q1", MESSAGE_NORMAL, {"x": "q1"}),
        ("q2", MESSAGE_ERROR, {"x": "q2"}),
    ]
    assert {m.conversation_id for m in messages} == {"c1"}


def _node(run_id: str, index: int, node_type: str, process_data: dict) -> NodeExecutionRecord:
    now = time.time()
    return NodeExecutionRecord(
        id=f"{run_id}-n{index}", index=index, node_id=node_type, node_type=node_type,
        title=node_type, predecessor_node_id=None, status="succeeded", inputs={},
        process_data=process_data, outputs={}, error=None, elapsed_time=0.1,
        execution_metadata={}, created_at=now, finished_at=now,
    )  # fmt: skip


def _file(file_id: str, variable: str, belongs_to: str = "user") -> FileRecord:
    return FileRecord(
        id=file_id, variable=variable, belongs_to=belongs_to, filename=f"{file_id}.png",
        extension=".png", mime_type="image/png", size=4, transfer_method="remote_url",
        remote_url=f"https://example.com/{file_id}.png", path=None,
    )  # fmt: skip


def test_a_turn_sees_the_agent_rounds_and_user_files_of_earlier_turns(store: Store) -> None:
    rounds = [{"id": "r1", "position": 1, "thought": "look", "tools": ["clock"]}]
    for n, (status, files) in enumerate(
        [(MESSAGE_NORMAL, [_file("pic", "sys.files"), _file("doc", "doc"),
                           _file("made", "sys.files", "assistant")]),
         (MESSAGE_ERROR, [_file("lost", "sys.files")]),
         (MESSAGE_NORMAL, [])]
    ):  # fmt: skip
        run_id = f"run-{n}"
        nodes = [
            _node(run_id, 0, "llm", {"agent_thoughts": [{"id": "not an agent's"}]}),
            _node(run_id, 1, "agent", {"agent_thoughts": [{**r, "id": f"{run_id}-r"} for r in rounds]}),
        ]  # fmt: skip
        failed = "failed" if status == MESSAGE_ERROR else "succeeded"
        _turn(store, "c1").commit(
            TurnResult(
                run=dataclasses.replace(_run(run_id, failed), nodes=nodes, files=files),
                message=MessageRecord(f"m{n}", f"q{n}", f"a{n}", status, None, 3, time.time()),
                variables={},
            )
        )
    turn = _turn(store, "c1")
    first, third = turn.state.history  # the failed turn is no one's memory
    assert (first.query, third.query) == ("q0", "q2")
    assert [t["id"] for t in first.thoughts] == ["run-0-r"]
    assert [t["id"] for t in third.thoughts] == ["run-2-r"]
    assert [f.id for f in first.files] == ["pic"] and third.files == ()
    assert first.files[0].remote_url == "https://example.com/pic.png"
    turn.release()


def test_a_busy_conversation_waits_for_the_turn_in_progress(store: Store) -> None:
    held = _turn(store, "c1")
    with pytest.raises(StoreError) as busy:
        _turn(store, "c1", wait=0.2)
    assert busy.value.message_key == "errors.store.conversationBusy"
    held.release()
    _turn(store, "c1", wait=0.2).release()


def test_concurrent_turns_lose_no_write(location: str) -> None:
    # Two store objects: two connection sets, as two processes would have.
    stores = [open_store(location), open_store(location)]

    def add(store: Store, n: int) -> None:
        for _ in range(n):
            turn = _turn(store, "counter", wait=30.0)
            value = int(turn.state.variables.get("n", VariableValue("number", 0)).value)
            _finish(turn, "inc", "ok", n=value + 1)

    threads = [threading.Thread(target=add, args=(stores[i % 2], 5)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert int(stores[0].variables("counter")["n"].value) == 20
    assert len(stores[1].messages("counter")) == 20
    for store in stores:
        store.close()


def test_conversations_are_listed_per_user_newest_first_in_pages(store: Store) -> None:
    for n in range(5):
        _finish(_turn(store, f"c{n}"), f"question number {n}", "a")
        time.sleep(0.01)
    _finish(_turn(store, "theirs", user="someone-else"), "q", "a")
    first, more = store.conversations(app_id=APP, user_id=USER, after_id=None, limit=2)
    assert [c.id for c in first] == ["c4", "c3"] and more
    second, more = store.conversations(app_id=APP, user_id=USER, after_id="c3", limit=2)
    assert [c.id for c in second] == ["c2", "c1"] and more
    last, more = store.conversations(app_id=APP, user_id=USER, after_id="c1", limit=2)
    assert [c.id for c in last] == ["c0"] and not more
    assert last[0].name == "question number 0" and last[0].inputs == {"x": "question number 0"}
    oldest, _ = store.conversations(
        app_id=APP, user_id=USER, after_id=None, limit=1, sort_by="created_at"
    )
    assert [c.id for c in oldest] == ["c0"]
    with pytest.raises(KeyError):
        store.conversations(app_id=APP, user_id=USER, after_id="theirs", limit=2)


def test_messages_are_paged_backwards_from_the_newest(store: Store) -> None:
    ids = [_finish(_turn(store, "c1"), f"q{n}", f"a{n}") for n in range(5)]
    page, more = store.message_page("c1", before_id=None, limit=2)
    assert [m.query for m in page] == ["q3", "q4"] and more
    page, more = store.message_page("c1", before_id=ids[3], limit=10)
    assert [m.query for m in page] == ["q0", "q1", "q2"] and not more
    with pytest.raises(KeyError):
        store.message_page("c1", before_id="nope", limit=2)


def test_deleting_a_conversation_removes_it_and_only_for_its_owner(store: Store) -> None:
    _finish(_turn(store, "c1"), "q", "a", topic="t")
    assert not store.delete_conversation("c1", app_id=APP, user_id="someone-else")
    run_id = store.messages("c1")[0].workflow_run_id
    assert store.run(run_id) is not None
    assert store.delete_conversation("c1", app_id=APP, user_id=USER)
    assert store.conversation("c1") is None
    assert store.messages("c1") == [] and store.variables("c1") == {}
    assert store.run(run_id) is None
    assert not store.delete_conversation("c1", app_id=APP, user_id=USER)


def test_an_upload_is_recorded_and_read_back(store: Store) -> None:
    upload = UploadRecord(
        id="u1", app_id=APP, user_id=USER, name="notes.txt", size=5, extension="txt",
        mime_type="text/plain", path="/data/u1/notes.txt", created_at=time.time(),
    )  # fmt: skip
    store.add_upload(upload)
    assert store.upload("u1") == upload
    assert store.upload("u2") is None


def test_a_workflow_run_is_recorded_and_read_back(store: Store) -> None:
    store.record_run(_run("r1", inputs={"city": "Oslo"}))
    found = store.run("r1")
    assert found is not None and found.inputs == {"city": "Oslo"} and found.status == "succeeded"


def test_postgres_opened_twice_at_once_migrates_once(postgres_url: str) -> None:  # noqa: F811
    opened: list[Store] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            opened.append(PostgresStore(postgres_url))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert {s.schema_version() for s in opened} == {len(PG_MIGRATIONS)}  # type: ignore[attr-defined]
    for store in opened:
        store.close()


def test_postgres_from_a_newer_build_is_refused(postgres_url: str) -> None:  # noqa: F811
    newer = (*PG_MIGRATIONS, "CREATE TABLE later_feature (id TEXT)")
    PostgresStore(postgres_url, migrations=newer).close()
    with pytest.raises(StoreError) as refused:
        PostgresStore(postgres_url)
    assert refused.value.message_key == "errors.store.newerSchema"


def test_an_unreachable_postgres_is_a_clear_error_without_the_password() -> None:
    with pytest.raises(StoreError) as refused:
        open_store("postgresql://app:s3cret-pw@127.0.0.1:9/db")
    text = str(refused.value)
    assert refused.value.message_key == "errors.store.unreadable"
    assert "127.0.0.1:9" in text and "s3cret-pw" not in text


def test_a_url_of_another_database_is_refused_by_name() -> None:
    with pytest.raises(StoreError) as refused:
        open_store("mysql://root:pw@localhost/db")
    assert refused.value.message_key == "errors.store.unknownUrl"
    assert "pw" not in str(refused.value)


def test_a_runs_timeline_is_kept_replaced_and_removed_with_its_conversation(store: Store) -> None:
    store.record_run(_run("r1"))
    assert store.timeline("r1") is None
    events = [{"event": "node_started", "t": 0.25, "data": {"id": "n1", "title": "Writer"}}]
    store.record_timeline("r1", events)
    assert store.timeline("r1") == events
    store.record_timeline("r1", [*events, {"event": "workflow_finished", "t": 1.5}])
    assert [e["event"] for e in store.timeline("r1") or []] == ["node_started", "workflow_finished"]
    with pytest.raises(Exception):  # noqa: B017 - each driver names it its own way
        store.record_timeline("no-such-run", events)  # only a recorded run keeps one
    _finish(_turn(store, "c1"), "q", "a")
    turn_run = store.messages("c1")[0].workflow_run_id
    store.record_timeline(turn_run, events)
    assert store.delete_conversation("c1", app_id=APP, user_id=USER)
    assert store.timeline(turn_run) is None
