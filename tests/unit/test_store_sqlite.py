"""The SQLite store on a real database file: migrations, turns, leases."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from firstgate.store import StoreError, TurnResult, VariableValue
from firstgate.store.base import MESSAGE_ERROR, MESSAGE_NORMAL, MessageRecord, RunRecord
from firstgate.store.sqlite import MIGRATIONS, SQLiteStore, _enable_wal

APP = "app-1"
USER = "user-1"


def _run(run_id: str, status: str = "succeeded") -> RunRecord:
    now = time.time()
    return RunRecord(
        id=run_id, app_id=APP, workflow_id="wf", mode="advanced-chat", user_id=USER,
        status=status, inputs={}, outputs={"answer": "a"}, error=None, elapsed_time=0.1,
        total_tokens=3, total_steps=2, exceptions_count=0, created_at=now, finished_at=now,
    )  # fmt: skip


def _turn(store: SQLiteStore, conversation: str, **kwargs: float):  # type: ignore[no-untyped-def]
    return store.begin_turn(
        conversation,
        app_id=APP,
        user_id=USER,
        mode="advanced-chat",
        lease_seconds=kwargs.get("lease", 60.0),
        wait_seconds=kwargs.get("wait", 5.0),
    )


def _finish(turn, query: str, answer: str, status: str = MESSAGE_NORMAL, **variables: object):  # type: ignore[no-untyped-def]
    run_id = f"run-{query}-{time.monotonic_ns()}"
    turn.commit(
        TurnResult(
            run=_run(run_id, "succeeded" if status == MESSAGE_NORMAL else "failed"),
            message=MessageRecord(f"m-{run_id}", query, answer, status, None, 3, time.time()),
            variables={k: VariableValue("string", v) for k, v in variables.items()},
        )
    )


def test_a_new_database_is_created_at_the_latest_schema(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "deep" / "state.db")
    assert store.schema_version() == len(MIGRATIONS)
    store.close()


def test_an_older_database_is_migrated_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old = SQLiteStore(path, migrations=MIGRATIONS)
    turn = _turn(old, "c1")
    _finish(turn, "hi", "hello", greeting="hi")
    old.close()
    # A later build adds a migration; opening the same file applies it once.
    newer = (*MIGRATIONS, "ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0")
    upgraded = SQLiteStore(path, migrations=newer)
    assert upgraded.schema_version() == len(newer)
    assert [m.answer for m in upgraded.messages("c1")] == ["hello"]
    assert upgraded.variables("c1") == {"greeting": VariableValue("string", "hi")}
    upgraded.close()
    # ...and the build without it refuses the database instead of misreading it.
    with pytest.raises(StoreError) as refused:
        SQLiteStore(path, migrations=MIGRATIONS)
    assert refused.value.message_key == "errors.store.newerSchema"


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError) as refused:
        SQLiteStore(path)
    assert refused.value.message_key == "errors.store.unreadable"
    assert str(path) in str(refused.value)


def test_a_turn_sees_what_the_previous_turn_wrote(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    first = _turn(store, "c1")
    assert first.state.is_new and first.state.dialogue_count == 0
    _finish(first, "q1", "a1", topic="cats")
    second = _turn(store, "c1")
    assert not second.state.is_new
    assert second.state.dialogue_count == 1
    assert second.state.variables["topic"].value == "cats"
    assert [(h.query, h.answer) for h in second.state.history] == [("q1", "a1")]
    second.release()


def test_a_failed_turn_keeps_its_message_but_writes_no_variable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    _finish(_turn(store, "c1"), "q1", "a1", topic="cats")
    _finish(_turn(store, "c1"), "q2", "partial", MESSAGE_ERROR, topic="dogs")
    third = _turn(store, "c1")
    assert third.state.variables["topic"].value == "cats"
    assert third.state.dialogue_count == 1  # the failed turn is not part of the dialogue
    assert [h.query for h in third.state.history] == ["q1"]
    assert [(m.query, m.status) for m in store.messages("c1")] == [
        ("q1", MESSAGE_NORMAL),
        ("q2", MESSAGE_ERROR),
    ]
    third.release()


def test_a_conversation_of_another_app_or_user_is_refused(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    _finish(_turn(store, "c1"), "q", "a")
    for app, user in (("other-app", USER), (APP, "other-user")):
        with pytest.raises(StoreError) as refused:
            store.begin_turn(
                "c1", app_id=app, user_id=user, mode="advanced-chat",
                lease_seconds=5, wait_seconds=0,
            )  # fmt: skip
        assert refused.value.message_key == "errors.store.foreignConversation"


def test_a_busy_conversation_waits_then_gives_up(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    held = _turn(store, "c1")
    with pytest.raises(StoreError) as busy:
        _turn(store, "c1", wait=0.2)
    assert busy.value.message_key == "errors.store.conversationBusy"
    held.release()
    _turn(store, "c1", wait=0.2).release()


def test_an_expired_lease_is_taken_over_and_the_late_commit_refused(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    slow = _turn(store, "c1", lease=0.05)
    time.sleep(0.1)
    fresh = _turn(store, "c1", wait=0.0)
    with pytest.raises(StoreError) as lost:
        _finish(slow, "late", "x", topic="late")
    assert lost.value.message_key == "errors.store.leaseLost"
    _finish(fresh, "q", "a", topic="fresh")
    assert store.variables("c1")["topic"].value == "fresh"


def test_a_lease_held_by_a_dead_process_is_taken_at_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    child = multiprocessing.get_context("spawn").Process(target=_hold_and_die, args=(str(path),))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    # The dead child's lease has an hour to run, yet the conversation is free.
    _turn(store, "c1", wait=0.0).release()


def _hold_and_die(path: str) -> None:
    store = SQLiteStore(path)
    store.begin_turn(
        "c1", app_id=APP, user_id=USER, mode="advanced-chat", lease_seconds=3600, wait_seconds=0
    )
    os._exit(0)  # no release: the process just dies


def _increment(path: str, rounds: int) -> None:
    store = SQLiteStore(path)
    for _ in range(rounds):
        turn = _turn(store, "counter", wait=60.0)
        current = turn.state.variables.get("n")
        value = int(current.value) if current else 0
        time.sleep(0.002)  # widen the read-modify-write window
        _finish(turn, "inc", str(value + 1), n=str(value + 1))
    store.close()


def test_concurrent_turns_in_threads_lose_no_write(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    threads = [threading.Thread(target=_increment, args=(path, 10)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    store = SQLiteStore(path)
    assert store.variables("counter")["n"].value == "40"
    assert len(store.messages("counter")) == 40


def test_concurrent_turns_in_processes_lose_no_write(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_increment, args=(path, 8)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(180)
        assert worker.exitcode == 0
    store = SQLiteStore(path)
    assert store.variables("counter")["n"].value == "24"
    seqs = sqlite3.connect(path).execute("SELECT seq FROM messages ORDER BY seq").fetchall()
    assert [s for (s,) in seqs] == list(range(1, 25))


def test_a_workflow_run_is_recorded_with_its_nodes(tmp_path: Path) -> None:
    from firstgate.store.base import FileRecord, NodeExecutionRecord

    store = SQLiteStore(tmp_path / "s.db")
    node = NodeExecutionRecord(
        id="e1", index=1, node_id="start", node_type="start", title="Start",
        predecessor_node_id=None, status="succeeded", inputs={"x": 1}, process_data={},
        outputs={"x": 1}, error=None, elapsed_time=0.01, execution_metadata={},
        created_at=1.0, finished_at=2.0,
    )  # fmt: skip
    file = FileRecord("f1", "doc", "user", "a.pdf", ".pdf", "application/pdf", 3,
                      "local_file", None, "/tmp/a.pdf")  # fmt: skip
    base = _run("r1")
    run = RunRecord(**{**{f: getattr(base, f) for f in base.__dataclass_fields__},
                       "nodes": [node], "files": [file]})  # fmt: skip
    store.record_run(run)
    loaded = store.run("r1")
    assert loaded is not None
    assert loaded.nodes[0] == node and loaded.files[0] == file
    assert loaded.outputs == {"answer": "a"}
    assert store.run("missing") is None


class _LockedAtFirst:
    """A real connection whose first `times` statements SQLite answers "locked"
    at once, as it does to a WAL switch while another opener holds the file."""

    def __init__(self, db: sqlite3.Connection, times: int, message: str) -> None:
        self.db, self.left, self.message, self.tries = db, times, message, 0

    def execute(self, sql: str) -> sqlite3.Cursor:
        self.tries += 1
        if self.left:
            self.left -= 1
            raise sqlite3.OperationalError(self.message)
        return self.db.execute(sql)


def test_the_wal_switch_waits_for_another_opener(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    locked = _LockedAtFirst(db, 3, "database is locked")
    _enable_wal(locked)  # type: ignore[arg-type]
    assert locked.tries == 4
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_wal_switch_gives_up_at_its_deadline_and_on_other_errors(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _enable_wal(_LockedAtFirst(db, 10**6, "database is locked"), wait_s=0.05)  # type: ignore[arg-type]
    other = _LockedAtFirst(db, 1, "disk I/O error")
    with pytest.raises(sqlite3.OperationalError, match="disk"):
        _enable_wal(other)  # type: ignore[arg-type]
    assert other.tries == 1


def test_openers_racing_on_a_new_database_all_open_it(tmp_path: Path) -> None:
    # Without the wait, about 3 rounds in 1,000 lost an opener to "database is
    # locked" here (more under load).
    errors: list[BaseException] = []

    def open_it(path: Path) -> None:
        try:
            SQLiteStore(path).close()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    for round_ in range(200):
        path = tmp_path / f"{round_}.db"
        openers = [threading.Thread(target=open_it, args=(path,)) for _ in range(6)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(60)
    assert errors == []


def test_the_wal_is_copied_back_only_past_its_page_limit(tmp_path: Path) -> None:
    """A durable run commits at every node: the WAL goes back into the database
    at WAL_CHECKPOINT_PAGES, not at SQLite's 1,000 (which cost a per-node run
    a third of its CPU)."""
    from firstgate.store.sqlite import WAL_CHECKPOINT_PAGES

    assert WAL_CHECKPOINT_PAGES > 2_000
    store = SQLiteStore(tmp_path / "s.db")
    try:
        for n in range(60):  # ~2,000 pages of 4 KB, in commits of ~130 KB
            with store.db.transaction() as tx:
                tx.execute("CREATE TABLE IF NOT EXISTS filler (n INTEGER, text TEXT)")
                tx.execute("INSERT INTO filler VALUES (?, ?)", (n, os.urandom(65_536).hex()))
        with store.db.read() as tx:
            busy, frames, _copied = tx.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert busy == 0 and frames > 1_500  # nothing was copied back on the way
    finally:
        store.close()
