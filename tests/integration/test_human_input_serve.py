"""The human-input flow through `firstgate serve`, as Dify's docs describe it:
a streaming run stops at `workflow_paused` with the form's token in
`human_input_required`; `GET /v1/form/human_input/{token}` shows the form;
a rejected submit leaves it open, an accepted one resumes the run (the events
endpoint with `continue_on_pause` follows it: `human_input_form_filled`, then
the rest under the same ids); a second submit is Dify's 412. Across a
restart (SQLite and PostgreSQL): another serve process resumes the run, and a
form whose deadline passed while no process ran takes the timeout branch."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from firstgate.store import open_store

from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.serve_support import serve

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "human_input_workflow.yml"
KEY = "review-key-0123456789"
KEYS = {"review": KEY, "other": "other-key-0123456789"}
NO_MODEL = "http://127.0.0.1:9/v1"  # the app calls no model


@pytest.fixture
def apps(tmp_path: Path) -> Path:
    folder = tmp_path / "apps"
    folder.mkdir()
    (folder / "review.yml").write_text(CORPUS.read_text())
    other = CORPUS.read_text().replace("name: Review a draft", "name: Another review")
    (folder / "other.yml").write_text(other)
    return folder


def _frames(response: httpx.Response) -> Iterator[dict[str, Any]]:
    buffer = ""
    for text in response.iter_text():
        buffer += text
        while "\n\n" in buffer:
            frame, buffer = buffer.split("\n\n", 1)
            data = [line[6:] for line in frame.split("\n") if line.startswith("data: ")]
            if data:
                yield json.loads("\n".join(data))


def _client(url: str, key: str = KEY) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _start(client: httpx.Client) -> list[dict[str, Any]]:
    body = {"inputs": {"topic": "tea"}, "response_mode": "streaming", "user": "ann"}
    with client.stream("POST", "/v1/workflows/run", json=body) as response:
        assert response.status_code == 200, response.read()
        return list(_frames(response))


def _upload(client: httpx.Client, name: str, data: bytes) -> str:
    reply = client.post(
        "/v1/files/upload", files={"file": (name, data, "text/plain")}, data={"user": "ann"}
    )
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


def _answer(client: httpx.Client) -> dict[str, Any]:
    first, second = _upload(client, "a.txt", b"one"), _upload(client, "b.txt", b"two")
    return {
        "edits": "my edits",
        "priority": "high",
        "attachment": {
            "transfer_method": "local_file",
            "upload_file_id": first,
            "type": "document",
        },
        "references": [
            {"transfer_method": "local_file", "upload_file_id": second, "type": "document"}
        ],
    }


def test_a_run_pauses_its_form_is_answered_once_and_the_run_goes_on(
    tmp_path: Path, apps: Path
) -> None:
    with serve(tmp_path, NO_MODEL, apps=apps, keys=KEYS) as server, _client(server.url) as client:
        events = _start(client)
        names = [e["event"] for e in events]
        assert names[-2:] == ["human_input_required", "workflow_paused"], names
        required, paused = events[-2]["data"], events[-1]["data"]
        run_id = events[-1]["workflow_run_id"]
        assert paused["status"] == "paused" and paused["paused_nodes"] == ["1748000000003"]
        token = required["form_token"]
        assert required["resolved_default_values"] == {"edits": "A short note about tea."}

        shown = client.get(f"/v1/form/human_input/{token}")
        assert shown.status_code == 200, shown.text
        form = shown.json()
        assert set(form) == {
            "form_content", "inputs", "resolved_default_values", "user_actions", "expiration_time",
        }  # fmt: skip
        assert [a["id"] for a in form["user_actions"]] == ["approve", "apply_edit", "reject"]
        assert form["expiration_time"] == required["expiration_time"]
        # Another app's key, a forged token: Dify's 404.
        with _client(server.url, KEYS["other"]) as other:
            assert other.get(f"/v1/form/human_input/{token}").json()["code"] == "not_found"
        assert client.get("/v1/form/human_input/forged-token").status_code == 404

        answer = _answer(client)
        submit = f"/v1/form/human_input/{token}"
        wrong = client.post(
            submit, json={"inputs": {"priority": "high"}, "action": "apply_edit", "user": "ann"}
        )
        assert wrong.status_code == 400 and wrong.json()["code"] == "invalid_form_data"
        assert "attachment" in wrong.json()["message"]
        bad_action = client.post(submit, json={"inputs": answer, "action": "nope", "user": "ann"})
        assert bad_action.json()["code"] == "invalid_form_data"
        assert client.get(submit).status_code == 200  # a rejected submit leaves it open
        no_user = client.post(submit, json={"inputs": answer, "action": "apply_edit"})
        assert no_user.status_code == 400 and no_user.json()["code"] == "invalid_param"

        accepted = client.post(
            submit, json={"inputs": answer, "action": "apply_edit", "user": "ann"}
        )
        assert accepted.status_code == 200 and accepted.json() == {}
        again = client.post(submit, json={"inputs": answer, "action": "approve", "user": "ann"})
        assert again.status_code == 412 and again.json()["code"] == "human_input_form_submitted"
        assert client.get(submit).json()["code"] == "human_input_form_submitted"

        query = {"user": "ann", "continue_on_pause": "true"}
        with client.stream("GET", f"/v1/workflow/{run_id}/events", params=query) as response:
            replay = list(_frames(response))
        names = [e["event"] for e in replay]
        assert "workflow_paused" in names, names
        resumed = names[names.index("workflow_paused") + 1 :]
        assert resumed[:2] == ["workflow_started", "human_input_form_filled"], names
        assert resumed[-1] == "workflow_finished" and names.count("workflow_finished") == 1
        filled = replay[names.index("human_input_form_filled")]
        assert filled["task_id"] == events[0]["task_id"] and filled["workflow_run_id"] == run_id
        assert filled["data"]["action_id"] == "apply_edit"
        assert filled["data"]["submitted_data"]["priority"] == "high"
        assert "my edits" in filled["data"]["rendered_content"]
        assert replay[-1]["data"]["outputs"] == {"text": "my edits", "action": "Use my edits"}
        # The default reader stops at the pause, as Dify's stream closes there.
        with client.stream(
            "GET", f"/v1/workflow/{run_id}/events", params={"user": "ann"}
        ) as response:
            assert [e["event"] for e in _frames(response)][-1] == "workflow_paused"
        record = client.get(f"/v1/workflows/run/{run_id}").json()
        assert record["status"] == "succeeded"


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    return request.getfixturevalue("postgres_url")


def _finished(client: httpx.Client, run_id: str, timeout: float = 60.0) -> dict[str, Any]:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        record = client.get(f"/v1/workflows/run/{run_id}").json()
        if record.get("status") not in ("running", "paused", None):
            return record
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not finish: {record}")


def test_another_serve_process_resumes_the_run_after_a_restart(
    tmp_path: Path, apps: Path, database: str
) -> None:
    with serve(tmp_path, NO_MODEL, apps=apps, keys=KEYS, database=database) as first:
        with _client(first.url) as client:
            events = _start(client)
            answer = _answer(client)
    # The first process is gone; the run waits in the store.
    token = events[-2]["data"]["form_token"]
    run_id = events[-1]["workflow_run_id"]
    with serve(tmp_path, NO_MODEL, apps=apps, keys=KEYS, database=database) as second:
        with _client(second.url) as client:
            assert client.get(f"/v1/workflows/run/{run_id}").json()["status"] == "paused"
            reply = client.post(
                f"/v1/form/human_input/{token}",
                json={"inputs": answer, "action": "approve", "user": "ann"},
            )
            assert reply.status_code == 200, reply.text
            query = {"user": "ann", "include_state_snapshot": "true", "continue_on_pause": "1"}
            with client.stream("GET", f"/v1/workflow/{run_id}/events", params=query) as response:
                replay = list(_frames(response))
            record = _finished(client, run_id)
    names = [e["event"] for e in replay]
    # The nodes the first process finished, replayed from the store, then the rest.
    finished_before = [e["data"]["node_id"] for e in replay if e["event"] == "node_finished"][:3]
    assert finished_before[:2] == ["1748000000001", "1748000000002"], names
    assert "human_input_form_filled" in names and names[-1] == "workflow_finished"
    assert {e["task_id"] for e in replay} <= {events[0]["task_id"], run_id}
    assert record["status"] == "succeeded"
    assert record["outputs"] == {"text": "A short note about tea.", "priority": "high"}


def test_a_form_whose_deadline_passed_while_nothing_ran_takes_the_timeout_branch(
    tmp_path: Path, apps: Path, database: str
) -> None:
    with serve(tmp_path, NO_MODEL, apps=apps, keys=KEYS, database=database) as first:
        with _client(first.url) as client:
            events = _start(client)
    token = events[-2]["data"]["form_token"]
    run_id = events[-1]["workflow_run_id"]
    # Time passes with no process running: the deadline is now behind us.
    _expire(database, token)
    # Only the start-up look can take it: the periodic one is an hour away.
    hour = ("--form-sweep-interval", "3600")
    with serve(tmp_path, NO_MODEL, apps=apps, keys=KEYS, database=database, extra=hour) as second:
        with _client(second.url) as client:
            record = _finished(client, run_id)
            late = client.post(
                f"/v1/form/human_input/{token}",
                json={"inputs": {}, "action": "approve", "user": "ann"},
            )
    assert record["status"] == "succeeded"
    assert record["outputs"] == {"outcome": "__timeout"}
    assert late.status_code == 412 and late.json()["code"] == "human_input_form_expired"


def _expire(database: str, token: str) -> None:
    store = open_store(database)
    try:
        with store.db.transaction() as tx:  # type: ignore[attr-defined]
            tx.execute(
                "UPDATE human_input_forms SET expires_at = ? WHERE token = ?",
                (time.time() - 1, token),
            )
    finally:
        store.close()


def test_a_deadline_that_passes_while_serve_runs_is_found_by_the_periodic_look(
    tmp_path: Path, apps: Path
) -> None:
    database = str(tmp_path / "state.db")
    often = ("--form-sweep-interval", "0.2")
    with serve(tmp_path, NO_MODEL, apps=apps, keys=KEYS, database=database, extra=often) as server:
        with _client(server.url) as client:
            events = _start(client)
            run_id = events[-1]["workflow_run_id"]
            time.sleep(0.5)  # a few looks: nothing is due yet
            assert client.get(f"/v1/workflows/run/{run_id}").json()["status"] == "paused"
            _expire(database, events[-2]["data"]["form_token"])
            record = _finished(client, run_id)
            query = {"user": "ann", "continue_on_pause": "true"}
            with client.stream("GET", f"/v1/workflow/{run_id}/events", params=query) as response:
                names = [e["event"] for e in _frames(response)]
    assert "human_input_form_timeout" in names and names[-1] == "workflow_finished"
    assert record["outputs"] == {"outcome": "__timeout"}


CHAT = """
kind: app
app: {mode: advanced-chat, name: Ask first}
workflow:
  graph:
    nodes:
    - {id: start, data: {type: start, title: Start, variables: []}}
    - id: ask
      data:
        type: human-input
        title: Ask
        form_content: 'Q: {{#sys.query#}} {{#$output.note#}}'
        inputs: [{type: paragraph, output_variable_name: note}]
        user_actions: [{id: ok, title: OK}]
    - {id: answer, data: {type: answer, title: Answer, answer: 'you said {{#ask.note#}}'}}
    edges:
    - {source: start, target: ask, sourceHandle: source}
    - {source: ask, target: answer, sourceHandle: ok}
"""


def test_a_chat_turn_pauses_and_its_answer_comes_after_the_form(tmp_path: Path) -> None:
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "ask.yml").write_text(CHAT)
    keys = {"ask": KEY}
    with serve(tmp_path, NO_MODEL, apps=apps, keys=keys) as server, _client(server.url) as client:
        blocking = client.post(
            "/v1/chat-messages",
            json={"inputs": {}, "query": "hello", "user": "ann", "response_mode": "blocking"},
        )
        assert blocking.status_code == 200, blocking.text
        assert blocking.json()["answer"] == "" and blocking.json()["conversation_id"]
        body = {"inputs": {}, "query": "again", "user": "ann", "response_mode": "streaming"}
        with client.stream("POST", "/v1/chat-messages", json=body) as response:
            events = list(_frames(response))
        assert [e["event"] for e in events][-2:] == ["human_input_required", "workflow_paused"]
        token = events[-2]["data"]["form_token"]
        reply = client.post(
            f"/v1/form/human_input/{token}",
            json={"inputs": {"note": "fine"}, "action": "ok", "user": "ann"},
        )
        assert reply.status_code == 200, reply.text
        run_id = events[-1]["data"]["workflow_run_id"]
        query = {"user": "ann", "continue_on_pause": "true"}
        with client.stream("GET", f"/v1/workflow/{run_id}/events", params=query) as response:
            after = list(_frames(response))
    answer = "".join(e.get("answer", "") for e in after if e["event"] == "message")
    assert answer == "you said fine" and after[-1]["event"] == "message_end"


def test_stopping_a_paused_run_ends_it_at_once(tmp_path: Path, apps: Path) -> None:
    """Nothing runs a paused run: its stop ends it where it waits (the record
    stopped, the form closed, the stream's `workflow_finished`)."""
    with serve(tmp_path, NO_MODEL, apps=apps, keys=KEYS) as server, _client(server.url) as client:
        events = _start(client)
        assert events[-1]["event"] == "workflow_paused"
        run_id, task_id = events[-1]["workflow_run_id"], events[-1]["task_id"]
        token = events[-2]["data"]["form_token"]
        assert client.get(f"/v1/workflows/run/{run_id}").json()["status"] == "paused"
        stopped = client.post(f"/v1/workflows/tasks/{task_id}/stop", json={"user": "ann"})
        assert stopped.status_code == 200 and stopped.json() == {"result": "success"}
        record = client.get(f"/v1/workflows/run/{run_id}").json()
        assert record["status"] == "stopped"
        submit = client.post(
            f"/v1/form/human_input/{token}",
            json={"inputs": {}, "action": "approve", "user": "ann"},
        )
        assert submit.status_code == 412 and submit.json()["code"] == "human_input_form_submitted"
        query = {"user": "ann", "continue_on_pause": "true"}
        with client.stream("GET", f"/v1/workflow/{run_id}/events", params=query) as response:
            replay = list(_frames(response))
        names = [e["event"] for e in replay]
        assert names[-1] == "workflow_finished" and names.count("workflow_finished") == 1
        assert replay[-1]["data"]["status"] == "stopped"
        assert replay[-1]["task_id"] == task_id
        store = open_store(str(tmp_path / "state.db"))
        try:
            assert store.checkpoint(run_id) is None
        finally:
            store.close()


def test_a_paused_run_is_stopped_by_its_task_id_after_a_restart(
    tmp_path: Path, apps: Path, database: str
) -> None:
    """The process the run paused in is gone; the stop names the task: the store
    knows the task of the paused run, which ends as stopped where it waits."""
    with serve(tmp_path, NO_MODEL, apps=apps, keys=KEYS, database=database) as first:
        with _client(first.url) as client:
            events = _start(client)
    run_id, task_id = events[-1]["workflow_run_id"], events[-1]["task_id"]
    token = events[-2]["data"]["form_token"]
    stop = f"/v1/workflows/tasks/{task_id}/stop"
    with serve(tmp_path, NO_MODEL, apps=apps, keys=KEYS, database=database) as second:
        with _client(second.url) as client, _client(second.url, KEYS["other"]) as other:
            assert other.post(stop, json={"user": "ann"}).status_code == 200  # another app's
            assert client.post(stop, json={"user": "bob"}).status_code == 200  # not bob's
            assert client.get(f"/v1/workflows/run/{run_id}").json()["status"] == "paused"
            stopped = client.post(stop, json={"user": "ann"})
            assert stopped.status_code == 200 and stopped.json() == {"result": "success"}
            record = client.get(f"/v1/workflows/run/{run_id}").json()
            submit = client.post(
                f"/v1/form/human_input/{token}",
                json={"inputs": {}, "action": "approve", "user": "ann"},
            )
            query = {"user": "ann", "continue_on_pause": "true"}
            with client.stream("GET", f"/v1/workflow/{run_id}/events", params=query) as response:
                replay = list(_frames(response))
    assert record["status"] == "stopped"
    assert submit.status_code == 412 and submit.json()["code"] == "human_input_form_submitted"
    assert [e["event"] for e in replay][-1] == "workflow_finished"
    assert replay[-1]["data"]["status"] == "stopped" and replay[-1]["task_id"] == task_id
    store = open_store(database)
    try:
        assert store.checkpoint(run_id) is None
        assert store.checkpoint_of_task(task_id) is None
    finally:
        store.close()
