"""A run the store will not write (a value it cannot hold, a commit that fails)
on both real backends: the run fails with a message of ours, the turn is kept
marked `error`, and the conversation is free for the next turn at once, not
after the lease (the run's time limit plus a minute)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from firstgate.runtime import RunOptions, RunResources, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.store import open_store
from firstgate.store.base import MESSAGE_ERROR, MESSAGE_NORMAL, Store

from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures

FLOWS = Path(__file__).resolve().parents[1] / "flows"
# Would a turn wait for the lease, it would give up after this and fail busy.
WAIT_S = 20.0
# What a raw exception would have put in the reply.
RAW_WORDS = ("codec", "surrogates", "UnicodeEncodeError", "disk I/O", "/var/lib/secret", "'M'")


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


class FailingCommits:
    """The store's own database, whose next `count` transactions that write a run
    fail at their end, after every statement ran: rolled back whole, as a full
    disk or a dropped connection at COMMIT would leave them."""

    def __init__(self, db: Any, count: int) -> None:
        self.db = db
        self.count = count

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    @contextmanager
    def transaction(self, *, leases: bool = False) -> Iterator[Any]:
        with self.db.transaction(leases=leases) as tx:
            watched = _Watched(tx)
            yield watched
            if watched.writes_run and self.count:
                self.count -= 1
                raise OSError("disk I/O error at /var/lib/secret/state")

    def read(self) -> AbstractContextManager[Any]:
        return self.db.read()


class _Watched:
    def __init__(self, tx: Any) -> None:
        self.tx = tx
        self.writes_run = False

    def execute(self, sql: str, params: Any = ()) -> Any:
        self.writes_run |= sql.startswith("INSERT INTO workflow_runs")
        return self.tx.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> None:
        self.tx.executemany(sql, rows)


def _chat(store: Store, query: str, conversation: str | None = None) -> list[ev.Event]:
    workflow = load_workflow(FLOWS / "greeting_around_query.yml")
    options = RunOptions(query=query, conversation_id=conversation, turn_wait_s=WAIT_S)
    with RunResources.open(store=store) as resources:
        return list(workflow.run({}, options, resources))


def _failed_cleanly(events: list[ev.Event]) -> str:
    finished = next(e for e in events if isinstance(e, ev.WorkflowFinished))
    assert finished.status == "failed"
    error = events[-1]
    assert isinstance(error, ev.ErrorEvent), error
    for text in (finished.error_message or "", error.message):
        assert not any(word in text for word in RAW_WORDS), text
    assert finished.error_message == "the run could not be saved in the state database"
    return events[0].run.conversation_id or ""


def _next_turn_is_not_blocked(store: Store, conversation: str) -> None:
    started = time.monotonic()
    events = _chat(store, "and now?", conversation)
    assert time.monotonic() - started < WAIT_S / 2
    assert isinstance(events[-1], ev.MessageEnd), events[-1]
    assert events[-1].answer == ">> and now? <<"


@pytest.mark.parametrize(
    ("query", "kept_as"),
    [
        ("half \udfff a pair", "half \ufffd a pair"),
        ("a pair \ud83d\ude00 apart", "a pair 😀 apart"),
    ],
)
def test_a_query_the_store_cannot_hold_fails_is_kept_and_frees_the_conversation(
    store: Store, query: str, kept_as: str
) -> None:
    conversation = _failed_cleanly(_chat(store, query))
    kept = store.messages(conversation)
    assert [(m.status, m.query) for m in kept] == [(MESSAGE_ERROR, kept_as)]
    assert kept[0].error == "the run could not be saved in the state database"
    assert store.run(kept[0].workflow_run_id).status == "failed"  # type: ignore[union-attr]
    _next_turn_is_not_blocked(store, conversation)


def test_a_nul_postgres_cannot_hold_fails_is_kept_and_frees_the_conversation(
    postgres_url: str,  # noqa: F811
) -> None:
    store = open_store(postgres_url)
    try:
        conversation = _failed_cleanly(_chat(store, "before\x00after"))
        assert [m.query for m in store.messages(conversation)] == ["before\ufffdafter"]
        _next_turn_is_not_blocked(store, conversation)
    finally:
        store.close()


def test_a_commit_that_fails_once_is_recorded_failed_and_the_next_turn_runs(
    store: Store,
) -> None:
    store.db = FailingCommits(store.db, 1)  # type: ignore[attr-defined]
    conversation = _failed_cleanly(_chat(store, "hello"))
    kept = store.messages(conversation)
    assert [(m.status, m.query, m.answer) for m in kept] == [
        (MESSAGE_ERROR, "hello", ">> hello <<")
    ]
    _next_turn_is_not_blocked(store, conversation)
    assert [m.status for m in store.messages(conversation)] == [MESSAGE_ERROR, MESSAGE_NORMAL]


def test_a_store_that_refuses_every_commit_still_frees_the_conversation(store: Store) -> None:
    real = store.db  # type: ignore[attr-defined]
    store.db = FailingCommits(real, 2)  # type: ignore[attr-defined]  # the turn and its failure
    conversation = _failed_cleanly(_chat(store, "hello"))
    assert store.db.count == 0  # type: ignore[attr-defined]
    assert store.messages(conversation) == []
    store.db = real  # type: ignore[attr-defined]
    _next_turn_is_not_blocked(store, conversation)


def test_a_workflow_run_the_store_refuses_is_recorded_failed(store: Store) -> None:
    store.db = FailingCommits(store.db, 1)  # type: ignore[attr-defined]
    workflow = load_workflow(FLOWS / "echo_input_to_end.yml")
    names = [v.variable for v in workflow.start_node.data.variables]  # type: ignore[attr-defined]
    with RunResources.open(store=store) as resources:
        events = list(workflow.run({name: "x" for name in names}, resources=resources))
    finished = events[-1]
    assert isinstance(finished, ev.WorkflowFinished) and finished.status == "failed"
    assert finished.error_message == "the run could not be saved in the state database"
    record = store.run(finished.run.workflow_run_id)
    assert record is not None and record.status == "failed"
    assert record.error == finished.error_message
