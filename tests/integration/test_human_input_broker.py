"""Human input in broker mode (`serve --broker`, Celery workers): a run pauses
on a worker and is let go (nothing holds it while it waits); its form,
answered over HTTP to the API process, queues it again, and another worker
process resumes it from its checkpoint: `human_input_form_filled` then the
rest, under the same run and task ids, positions going on (`Last-Event-ID`
across the resume). A second submit is Dify's 412. The hand-over between a
closed form and a worker still pausing is one Redis script each (checked here
against a real Redis). Real Redis, PostgreSQL, worker and API processes."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from firstgate.serve.distributed.run_state import RunStore, lease_key, run_key

from tests.integration.test_distributed import frames
from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.redis_support import redis_server, worker
from tests.serve_support import serve

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("FIRSTGATE_GEVENT") == "1", reason="the processes run gevent in both passes"
    ),
]

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "human_input_workflow.yml"
KEY = "review-key-0123456789"
KEYS = {"review": KEY}
NO_MODEL = "http://127.0.0.1:9"  # the app calls no model
DURABLE = ("--durability", "node")


def _client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)


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


def _events(reply: httpx.Response, within: float = 60.0) -> list[tuple[int, dict[str, Any]]]:
    """The stream's events; a stream still open after `within` seconds (pings keep
    it alive) fails the test instead of hanging it."""
    give_up = time.monotonic() + within
    found: list[tuple[int, dict[str, Any]]] = []
    for event_id, event in frames(reply):
        assert time.monotonic() < give_up, [e["event"] for _, e in found]
        if isinstance(event, dict) and event_id is not None:
            found.append((event_id, event))
    return found


def test_a_run_paused_on_one_worker_is_resumed_by_another_after_a_submit(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "review.yml").write_text(CORPUS.read_text())
    body = {"inputs": {"topic": "tea"}, "response_mode": "streaming", "user": "ann"}
    with redis_server(tmp_path / "redis") as broker:
        client = redis.Redis.from_url(broker.url)
        common = dict(apps=apps, extra=DURABLE, keys=KEYS)
        with (
            serve(
                tmp_path,
                NO_MODEL,
                apps=apps,
                database=postgres_url,
                extra=("--broker", broker.url, *DURABLE),
                keys=KEYS,
                env={"FIRSTGATE_SSE_PING_S": "0.5"},
            ) as api,
            _client(api.url) as http,
        ):
            with worker(tmp_path, NO_MODEL, broker.url, postgres_url, name="w1", **common):
                with http.stream("POST", "/v1/workflows/run", json=body) as reply:
                    assert reply.status_code == 200, reply.read()
                    first = _events(reply)
                task_id = first[0][1]["task_id"]
                # Let go: no worker holds it, no lease, its stream open (no end marker).
                give_up = time.monotonic() + 10
                while client.hget(run_key(task_id), "state") != b"paused":
                    assert time.monotonic() < give_up, client.hmget(
                        run_key(task_id), "state", "owner", "form"
                    )
                    time.sleep(0.02)
                assert client.hget(run_key(task_id), "owner") == b""
                assert not client.exists(lease_key(task_id))
            # The worker that paused it is gone; another one resumes it.
            with worker(tmp_path, NO_MODEL, broker.url, postgres_url, name="w2", **common):
                names = [e["event"] for _, e in first]
                assert names[-2:] == ["human_input_required", "workflow_paused"], names
                token = first[-2][1]["data"]["form_token"]
                run_id = first[-1][1]["workflow_run_id"]
                submit = f"/v1/form/human_input/{token}"
                assert http.get(submit).status_code == 200
                assert http.get(f"/v1/workflows/run/{run_id}").json()["status"] == "paused"
                answer = _answer(http)
                wrong = http.post(
                    submit,
                    json={"inputs": {"priority": "high"}, "action": "apply_edit", "user": "ann"},
                )
                assert wrong.status_code == 400 and wrong.json()["code"] == "invalid_form_data"
                assert http.get(submit).status_code == 200  # still open
                accepted = http.post(
                    submit, json={"inputs": answer, "action": "apply_edit", "user": "ann"}
                )
                assert accepted.status_code == 200 and accepted.json() == {}, accepted.text
                again = http.post(
                    submit, json={"inputs": answer, "action": "approve", "user": "ann"}
                )
                assert again.status_code == 412, again.text
                assert again.json()["code"] == "human_input_form_submitted"
                paused_at = first[-1][0]
                query = {"user": "ann", "continue_on_pause": "true"}
                with http.stream(
                    "GET",
                    f"/v1/workflow/{run_id}/events",
                    params=query,
                    headers={"Last-Event-ID": str(paused_at)},
                ) as reply:
                    rest = _events(reply)
                with http.stream("GET", f"/v1/workflow/{run_id}/events", params=query) as reply:
                    whole = _events(reply)
                record = http.get(f"/v1/workflows/run/{run_id}").json()
    names = [e["event"] for _, e in rest]
    assert names[:2] == ["workflow_started", "human_input_form_filled"], names
    assert rest[0][1]["data"]["reason"] == "resumption"
    assert names[-1] == "workflow_finished" and names.count("workflow_finished") == 1
    assert rest[-1][1]["data"]["status"] == "succeeded", rest[-1]
    assert rest[-1][1]["data"]["outputs"] == {"text": "my edits", "action": "Use my edits"}
    filled = rest[1][1]["data"]
    assert filled["action_id"] == "apply_edit" and filled["submitted_data"]["priority"] == "high"
    # One stream: the same ids, positions going on from the pause.
    assert {e["task_id"] for _, e in rest} == {task_id}
    assert {e["workflow_run_id"] for _, e in rest if "workflow_run_id" in e} == {run_id}
    assert [i for i, _ in rest] == list(range(paused_at + 1, paused_at + 1 + len(rest)))
    assert whole == first + rest
    assert record["status"] == "succeeded"


def _queued(store: RunStore, task_id: str) -> None:
    meta = {"request": "{}", "app_stem": "a", "app_id": "a", "user": "u", "workflow_run_id": "r"}
    store.queue(task_id, f"run-{task_id}", meta)


def test_a_form_closed_while_its_worker_pauses_queues_the_run_once(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis") as broker:
        client = redis.Redis.from_url(broker.url)
        store = RunStore(client, keep_finished=60)
        try:
            # Closed before the holder let it go: the holder queues it (once).
            _queued(store, "t1")
            assert store.claim("t1", "w:1", 10, 3) == "claimed"
            assert store.reopen("t1", "form-a") == "pending"
            assert store.reopen("t1", "form-a") == "pending"
            assert store.pause("t1", "w:1", "") == "requeue"
            assert store.meta("t1")["state"] == "queued"
            assert store.claim("t1", "w:2", 10, 3) == "claimed"
            # Paused again at the next form: it waits, then a submit queues it.
            assert store.pause("t1", "w:2", "form-a") == "paused"
            assert store.meta("t1")["state"] == "paused"
            assert not client.exists(lease_key("t1"))
            assert store.reopen("t1", "form-a") == "pending"  # its form already used
            assert store.meta("t1")["state"] == "paused"
            assert store.reopen("t1", "form-b") == "queued"
            assert store.reopen("t1", "form-b") == "pending"  # the same form: queued once
            assert store.meta("t1")["state"] == "queued"
            # Only its holder lets it go; an ended run is not queued again.
            assert store.claim("t1", "w:3", 10, 3) == "claimed"
            assert store.pause("t1", "w:other", "form-b") is None
            assert store.publish("t1", "w:3", "end")
            assert store.reopen("t1", "form-c") == "finished"
            assert store.reopen("nobody", "form-d") == "unknown"
        finally:
            client.close()
