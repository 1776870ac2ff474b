"""Two exports with the same name and mode (one export copied per customer, v1
and v2 of an app), each with its own key, over real sockets on both stores:
neither key reaches what the other app's users made (conversations, messages,
runs, event streams, uploads). And an app id two exports would share is
refused at start-up, as a shared key is."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from firstgate.serve.apps import load_directory

from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.serve_support import APPS, Server, echo_model, serve

pytestmark = pytest.mark.slow

KEYS = {
    "chat_a": "chat-a-key-0123456789",
    "chat_b": "chat-b-key-0123456789",
    "story_a": "story-a-key-0123456789",
    "story_b": "story-b-key-0123456789",
}
USER = "alice"  # the same end user name in both apps


def _apps(directory: Path) -> Path:
    directory.mkdir()
    for stem in KEYS:
        source = APPS / ("chat.yml" if stem.startswith("chat") else "story.yml")
        (directory / f"{stem}.yml").write_text(source.read_text())
    return directory


@pytest.fixture(scope="module")
def model() -> Iterator[str]:
    with echo_model() as base_url:
        yield base_url


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, model: str, tmp_path: Path) -> Iterator[Server]:
    database = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with serve(
        tmp_path, model, apps=_apps(tmp_path / "apps"), database=database, keys=KEYS
    ) as running:
        yield running


def _client(server: Server, stem: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {KEYS[stem]}"}, timeout=30
    )


def _not_found(reply: httpx.Response) -> None:
    assert reply.status_code == 404, reply.text
    assert reply.json()["code"] == "not_found"


def test_key_b_reaches_no_conversation_of_app_a(server: Server) -> None:
    with _client(server, "chat_a") as a, _client(server, "chat_b") as b:
        assert a.get("/v1/info").json()["name"] == b.get("/v1/info").json()["name"]
        first = a.post(
            "/v1/chat-messages",
            json={"inputs": {}, "query": "secret plan", "user": USER, "response_mode": "blocking"},
        )
        assert first.status_code == 200, first.text
        conversation = first.json()["conversation_id"]
        # B lists nothing, reads nothing, continues nothing, deletes nothing.
        assert b.get("/v1/conversations", params={"user": USER}).json()["data"] == []
        _not_found(b.get("/v1/messages", params={"user": USER, "conversation_id": conversation}))
        again = {"inputs": {}, "query": "more", "user": USER, "conversation_id": conversation}
        _not_found(b.post("/v1/chat-messages", json={**again, "response_mode": "blocking"}))
        _not_found(b.request("DELETE", f"/v1/conversations/{conversation}", json={"user": USER}))
        # A's conversation is whole: one turn, still there, still A's to continue.
        listed = a.get("/v1/conversations", params={"user": USER}).json()["data"]
        assert [c["id"] for c in listed] == [conversation]
        page = a.get("/v1/messages", params={"user": USER, "conversation_id": conversation})
        assert [m["query"] for m in page.json()["data"]] == ["secret plan"]
        more = a.post("/v1/chat-messages", json={**again, "response_mode": "blocking"})
        assert more.status_code == 200 and more.json()["conversation_id"] == conversation


def test_key_b_reaches_no_run_event_stream_or_upload_of_app_a(server: Server) -> None:
    with _client(server, "story_a") as a, _client(server, "story_b") as b:
        upload = a.post(
            "/v1/files/upload", files={"file": ("plan.txt", b"A's plan", "text/plain")},
            data={"user": USER},
        )  # fmt: skip
        assert upload.status_code == 201, upload.text
        doc = {
            "transfer_method": "local_file",
            "upload_file_id": upload.json()["id"],
            "type": "document",
        }
        body = {
            "inputs": {"topic": "[medium] long", "doc": doc},
            "user": USER,
            "response_mode": "streaming",
        }
        with a.stream("POST", "/v1/workflows/run", json=body) as reply:
            lines = reply.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            started = json.loads(first[6:])
            run_id = started["workflow_run_id"]
            # While it runs: B sees neither the run nor its events, and B's stop
            # (Dify answers success either way) leaves it running.
            stop = b.post(f"/v1/workflows/tasks/{started['task_id']}/stop", json={"user": USER})
            assert stop.json() == {"result": "success"}
            _not_found(b.get(f"/v1/workflows/run/{run_id}"))
            _not_found(b.get(f"/v1/workflow/{run_id}/events", params={"user": USER}))
            assert a.get(f"/v1/workflows/run/{run_id}").json()["status"] == "running"
            for _ in lines:
                pass
        # Ended and recorded: still A's alone.
        deadline = time.monotonic() + 20
        while a.get(f"/v1/workflows/run/{run_id}").json()["status"] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        record = a.get(f"/v1/workflows/run/{run_id}").json()
        assert (
            record["status"] == "succeeded" and record["outputs"]["doc"]["filename"] == "plan.txt"
        )
        _not_found(b.get(f"/v1/workflows/run/{run_id}"))
        _not_found(b.get(f"/v1/workflow/{run_id}/events", params={"user": USER}))
        # B cannot run with A's upload.
        refused = b.post(
            "/v1/workflows/run",
            json={"inputs": {"topic": "x", "doc": doc}, "user": USER, "response_mode": "blocking"},
        )
        assert refused.status_code == 400 and refused.json()["code"] == "invalid_param"
        assert upload.json()["id"] in refused.json()["message"]  # "no file ... to this app"


def test_the_same_file_keeps_its_app_id_and_a_shared_id_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    apps = _apps(tmp_path / "apps")
    environ = {f"FIRSTGATE_APP_KEY_{stem.upper()}": key for stem, key in KEYS.items()}
    first = load_directory(apps, environ)
    ids = {stem: app.workflow.app_id for stem, app in first.apps.items()}
    assert len(set(ids.values())) == len(KEYS)  # one name, four files: four apps
    # The id does not depend on where the file lies (a CLI run, a worker's copy).
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    os.replace(apps / "chat_a.yml", moved / "chat_a.yml")
    from firstgate.runtime import load_workflow

    assert load_workflow(moved / "chat_a.yml").app_id == ids["chat_a"]

    # Were two ids to coincide, the second app would not be served, by name.
    import firstgate.serve.apps as apps_module

    real = apps_module.load_app

    def same_id(*args, **kwargs):  # type: ignore[no-untyped-def]
        app = real(*args, **kwargs)
        app.workflow.app_id = "one-id-for-all"
        return app

    monkeypatch.setattr(apps_module, "load_app", same_id)
    loaded = load_directory(apps, environ)
    assert list(loaded.apps) == ["chat_b"]
    assert {(s.path.name, s.message_key, s.params["other"]) for s in loaded.skipped} == {
        ("story_a.yml", "serve.app.idTaken", "chat_b.yml"),
        ("story_b.yml", "serve.app.idTaken", "chat_b.yml"),
    }
