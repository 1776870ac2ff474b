"""Human-input forms in the store, on both real backends: a token finds its
form, one submit closes it (also when two processes race), a submit after the
deadline is refused, and a due form is closed by its timeout exactly once."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstgate.store import open_store
from firstgate.store.base import FORM_SUBMITTED, FORM_TIMEOUT, FORM_WAITING, FormRecord, Store

from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures


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


def _form(token: str, *, expires_in: float = 3600.0, run: str = "run-1") -> FormRecord:
    now = time.time()
    return FormRecord(
        id=f"form-{token}",
        token=token,
        app_id="app",
        workflow_run_id=run,
        node_id="review",
        user_id="ann",
        definition={"form_content": "Approve?", "actions": [{"id": "ok", "title": "OK"}]},
        expires_at=now + expires_in,
        created_at=now,
    )


def test_a_token_finds_its_form_and_one_submit_closes_it(store: Store) -> None:
    store.add_form(_form("tok-a"))
    found = store.form("tok-a")
    assert found is not None and found.status == FORM_WAITING
    assert found.definition["actions"] == [{"id": "ok", "title": "OK"}]
    assert store.form("tok-unknown") is None
    now = time.time()
    assert store.close_form(
        "tok-a", status=FORM_SUBMITTED, now=now, action_id="ok", submission={"note": "fine"}
    )
    # The second submit finds nothing to close.
    assert not store.close_form("tok-a", status=FORM_SUBMITTED, now=now, action_id="ok")
    closed = store.form("tok-a")
    assert closed is not None and closed.status == FORM_SUBMITTED
    assert closed.action_id == "ok" and closed.submission == {"note": "fine"}
    assert closed.closed_at == pytest.approx(now)
    assert [f.token for f in store.run_forms("run-1")] == ["tok-a"]


def test_a_token_is_kept_once(store: Store) -> None:
    store.add_form(_form("tok-b"))
    with pytest.raises(Exception):  # noqa: B017 - the backend's integrity error
        store.add_form(_form("tok-b"))


def test_past_its_deadline_a_form_takes_no_submit_and_times_out_once(store: Store) -> None:
    store.add_form(_form("tok-late", expires_in=-1.0))
    store.add_form(_form("tok-open", expires_in=3600.0))
    now = time.time()
    assert not store.close_form("tok-late", status=FORM_SUBMITTED, now=now, action_id="ok")
    assert [f.token for f in store.due_forms(now)] == ["tok-late"]
    # A form not yet due is not timed out.
    assert not store.close_form("tok-open", status=FORM_TIMEOUT, now=now)
    assert store.close_form("tok-late", status=FORM_TIMEOUT, now=now)
    assert not store.close_form("tok-late", status=FORM_TIMEOUT, now=now)
    assert store.due_forms(now) == []
    late = store.form("tok-late")
    assert late is not None and late.status == FORM_TIMEOUT and late.action_id is None


def _race(location: str, token: str, start: float, results: multiprocessing.Queue) -> None:
    store = open_store(location)
    try:
        while time.time() < start:
            time.sleep(0.001)
        results.put(store.close_form(token, status=FORM_SUBMITTED, now=time.time(), action_id="ok"))
    finally:
        store.close()


def test_two_processes_submitting_at_once_close_the_form_once(store: Store, location: str) -> None:
    store.add_form(_form("tok-race"))
    results: multiprocessing.Queue = multiprocessing.get_context("spawn").Queue()
    start = time.time() + 1.5
    context = multiprocessing.get_context("spawn")
    racers = [
        context.Process(target=_race, args=(location, "tok-race", start, results)) for _ in range(4)
    ]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(30)
    outcomes = sorted(results.get(timeout=5) for _ in racers)
    assert outcomes == [False, False, False, True]
