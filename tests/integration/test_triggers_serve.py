"""`firstgate serve` with trigger apps, as a user starts it: a webhook call
over a real socket starts a run recorded in the store (through the same run
machinery as an API run), bad calls get Dify's statuses, and a schedule
fires its ticks.

The schedule ticks every second: `FIRSTGATE_SCHEDULE_SECONDS=1` lets the
cron expression carry a leading seconds field (test-only); everything else
(parsing, the next tick in its zone, the claim, the run) is the code a
five-field schedule runs."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.serve_support import Server, serve

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
KEYS = {
    "upload": "upload-key-0123456789",
    "blob": "blob-key-0123456789",
    "orders": "orders-key-0123456789",
    "tick": "tick-key-0123456789",
    "bare": "bare-key-01234567",
}
DIFY_ID = "Qm9vc3Rlck9yZGVyV2ViaG9v"  # the id in the export's webhook_url
LIMIT = 4096  # WEBHOOK_REQUEST_BODY_MAX_SIZE for these servers
HEADERS = {"X-Shop-Signature": "sig-1"}

TICK_APP = """\
app: {mode: workflow, name: Ticker}
kind: app
version: 0.5.0
workflow:
  graph:
    edges:
    - {id: e1, source: tick, sourceHandle: source, target: done, targetHandle: target}
    nodes:
    - data: {type: trigger-schedule, title: Every second, mode: cron,
             cron_expression: '* * * * * *', timezone: Pacific/Auckland, enabled: true}
      id: tick
    - data:
        type: end
        title: End
        outputs: [{variable: run, value_selector: [sys, workflow_run_id]}]
      id: done
"""
BARE_APP = """\
app: {mode: workflow, name: Bare hook}
kind: app
version: 0.5.0
workflow:
  graph:
    edges:
    - {id: e1, source: hook, sourceHandle: source, target: done, targetHandle: target}
    nodes:
    - data: {type: trigger-webhook, title: Hook, method: GET, params: [{name: q, required: true}]}
      id: hook
    - data: {type: end, title: End, outputs: [{variable: q, value_selector: [hook, q]}]}
      id: done
"""

UPLOAD_APP = """\
app: {mode: workflow, name: Upload hook}
kind: app
version: 0.5.0
workflow:
  graph:
    edges:
    - {id: e1, source: hook, sourceHandle: source, target: done, targetHandle: target}
    nodes:
    - data:
        type: trigger-webhook
        title: Hook
        method: POST
        content_type: multipart/form-data
        webhook_url: https://dify.example/triggers/webhook/uploadHookId0123456789
        body: [{name: note, type: string}, {name: doc, type: file, required: true}]
      id: hook
    - data:
        type: end
        title: End
        outputs:
        - {variable: note, value_selector: [hook, note]}
        - {variable: doc, value_selector: [hook, doc]}
      id: done
"""
BLOB_APP = """\
app: {mode: workflow, name: Blob hook}
kind: app
version: 0.5.0
workflow:
  graph:
    edges:
    - {id: e1, source: hook, sourceHandle: source, target: done, targetHandle: target}
    nodes:
    - data:
        type: trigger-webhook
        title: Hook
        method: PUT
        content_type: application/octet-stream
        webhook_url: https://dify.example/triggers/webhook/blobHookId012345678901
        body: [{name: payload, type: file, required: true}]
      id: hook
    - data:
        type: end
        title: End
        outputs: [{variable: payload, value_selector: [hook, payload]}]
      id: done
"""


def write_apps(directory: Path) -> Path:
    directory.mkdir()
    shutil.copy(CORPUS / "trigger_webhook_workflow.yml", directory / "orders.yml")
    (directory / "tick.yml").write_text(TICK_APP)
    (directory / "bare.yml").write_text(BARE_APP)
    (directory / "upload.yml").write_text(UPLOAD_APP)
    (directory / "blob.yml").write_text(BLOB_APP)
    return directory


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("triggers")
    apps = write_apps(tmp / "apps")
    env = {"FIRSTGATE_SCHEDULE_SECONDS": "1", "WEBHOOK_REQUEST_BODY_MAX_SIZE": str(LIMIT)}
    # No model is called: the address is never dialled.
    with serve(tmp, "http://127.0.0.1:9/v1", apps=apps, env=env, keys=KEYS) as running:
        yield running


def client(server: Server, app: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {KEYS[app]}"} if app else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def runs_of(server: Server, app: str) -> list[dict]:
    with client(server, app) as api:
        reply = api.get("/v1/workflows/logs", params={"limit": 100})
        assert reply.status_code == 200, reply.text
        return [entry["workflow_run"] for entry in reply.json()["data"]]


def wait_for_runs(server: Server, app: str, count: int, timeout: float = 30) -> list[dict]:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        found = [r for r in runs_of(server, app) if r["status"] != "running"]
        if len(found) >= count:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{app}: fewer than {count} runs: {runs_of(server, app)}")


def test_a_webhook_call_starts_a_run_and_gets_the_configured_reply(server: Server) -> None:
    before = len(runs_of(server, "orders"))
    with client(server) as caller:
        reply = caller.post(
            f"/triggers/webhook/{DIFY_ID}?attempt=3",
            json={"event": "paid", "amount": 20, "tags": ["x"]},
            headers=HEADERS,
        )
    assert reply.status_code == 202 and reply.json() == {"received": True}
    run = wait_for_runs(server, "orders", before + 1)[0]
    assert run["status"] == "succeeded"
    with client(server, "orders") as api:
        record = api.get(f"/v1/workflows/run/{run['id']}").json()
    assert record["outputs"]["summary"] == "paid of 20 (x), attempt 3, signed sig-1"
    assert record["outputs"]["raw"]["query_params"] == {"attempt": 3}


def log_entries(server: Server, app: str) -> list[dict]:
    with client(server, app) as api:
        return api.get("/v1/workflows/logs", params={"limit": 100}).json()["data"]


def test_the_log_says_how_each_run_was_started(server: Server) -> None:
    with client(server) as caller:
        reply = caller.post(
            f"/triggers/webhook/{DIFY_ID}", json={"event": "paid", "amount": 1}, headers=HEADERS
        )
        assert reply.status_code == 202
    wait_for_runs(server, "orders", 1)
    wait_for_runs(server, "tick", 1)
    hooked, ticked = log_entries(server, "orders")[0], log_entries(server, "tick")[0]
    # Dify's `WorkflowRunTriggeredFrom` values; a triggered run is a Service API run
    # of an anonymous end user of type `trigger`.
    assert hooked["workflow_run"]["triggered_from"] == "webhook"
    assert ticked["workflow_run"]["triggered_from"] == "schedule"
    for entry, user in ((hooked, "trigger-webhook"), (ticked, "trigger-schedule")):
        assert entry["created_from"] == "service-api" and entry["details"] is None
        assert entry["created_by_role"] == "end_user"
        assert entry["created_by_end_user"]["type"] == "trigger"
        assert entry["created_by_end_user"]["is_anonymous"] is True
        assert entry["created_by_end_user"]["session_id"] == user


def test_a_webhook_without_difys_id_has_one_derived_from_the_key(server: Server) -> None:
    line = next(x for x in server.output().splitlines() if "Bare hook" in x and "/triggers/" in x)
    path = line.rsplit(" ", 1)[1]
    assert len(path.rsplit("/", 1)[1]) == 24 and KEYS["bare"] not in path
    with client(server) as caller:
        reply = caller.get(path, params={"q": "hello"})
        assert reply.status_code == 200
        assert reply.json() == {"status": "success", "message": "Webhook processed successfully"}
        missing = caller.get(path)
    assert missing.status_code == 400 and missing.json()["error"] == "Bad Request"
    assert "q" in missing.json()["message"]
    run = wait_for_runs(server, "bare", 1)[0]
    with client(server, "bare") as api:
        assert api.get(f"/v1/workflows/run/{run['id']}").json()["outputs"] == {"q": "hello"}


def test_bad_calls_get_difys_statuses_and_start_nothing(server: Server) -> None:
    url = f"/triggers/webhook/{DIFY_ID}"
    before = len(runs_of(server, "orders"))
    with client(server) as caller:
        wrong_method = caller.get(url, headers=HEADERS)
        wrong_type = caller.post(
            url, content=b"paid", headers={**HEADERS, "Content-Type": "text/plain"}
        )
        no_signature = caller.post(url, json={"event": "paid"})
        no_event = caller.post(url, json={"amount": 1}, headers=HEADERS)
        bad_type = caller.post(url, json={"event": "paid", "amount": "ten"}, headers=HEADERS)
        bad_json = caller.post(
            url, content=b"{nope", headers={**HEADERS, "Content-Type": "application/json"}
        )
        unknown = caller.post("/triggers/webhook/not-a-webhook-id-here", json={})
        too_large = caller.post(url, json={"event": "x" * LIMIT}, headers=HEADERS)

        def chunks() -> Iterator[bytes]:
            yield b'{"event": "'
            for _ in range(LIMIT // 512 + 1):
                yield b"y" * 512
            yield b'"}'

        chunked = caller.post(
            url, content=chunks(), headers={**HEADERS, "Content-Type": "application/json"}
        )
        localized = caller.get(url, headers={**HEADERS, "Accept-Language": "de-DE"})
    for reply in (wrong_method, wrong_type, no_signature, no_event, bad_type, bad_json):
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"] == "Bad Request"
    assert "POST" in wrong_method.json()["message"] and "GET" in wrong_method.json()["message"]
    assert "text/plain" in wrong_type.json()["message"]
    assert "X-Shop-Signature" in no_signature.json()["message"]
    assert "event" in no_event.json()["message"] and "amount" in bad_type.json()["message"]
    assert unknown.status_code == 404
    assert too_large.status_code == 413 and chunked.status_code == 413
    assert str(LIMIT) in too_large.json()["message"]
    assert "HTTP-Methode" in localized.json()["message"]
    time.sleep(0.5)
    assert len(runs_of(server, "orders")) == before


def test_a_trigger_app_is_not_run_through_the_service_api(server: Server) -> None:
    with client(server, "orders") as api:
        reply = api.post("/v1/workflows/run", json={"inputs": {}, "user": "u"})
    assert reply.status_code == 400 and reply.json()["code"] == "invalid_param"
    assert "trigger" in reply.json()["message"]


def test_a_schedule_fires_each_tick_once(server: Server) -> None:
    assert "schedule of Ticker (tick): * * * * * * in Pacific/Auckland" in server.output()
    first = wait_for_runs(server, "tick", 3)
    assert all(r["status"] == "succeeded" for r in first)
    began = time.monotonic()
    before = len(runs_of(server, "tick"))  # running ones too: each is a tick already fired
    time.sleep(3)
    count = len(runs_of(server, "tick"))
    window = time.monotonic() - began
    # One run a second: at most one per tick that passed (twice as many if a tick fired twice).
    assert 2 <= count - before <= window + 1.5


def test_files_a_webhook_carries_become_file_outputs(server: Server) -> None:
    with client(server) as caller:
        reply = caller.post(
            "/triggers/webhook/uploadHookId0123456789",
            data={"note": "monthly"},
            files={"doc": ("report.txt", b"hello there", "text/plain")},
        )
        assert reply.status_code == 200, reply.text
        uploads = server.log.parent / "uploads"
        kept = len(list(uploads.iterdir()))
        missing = caller.post(
            "/triggers/webhook/uploadHookId0123456789",
            data={"note": "x"},
            files={"other": ("a.txt", b"a", "text/plain")},
        )
        assert missing.status_code == 400 and "doc" in missing.json()["message"]
        assert len(list(uploads.iterdir())) == kept  # a refused call keeps no file
        blob = caller.put(
            "/triggers/webhook/blobHookId012345678901",
            content=b"\x00\x01binary",
            headers={"Content-Type": "application/octet-stream"},
        )
        assert blob.status_code == 200, blob.text
        empty = caller.put(
            "/triggers/webhook/blobHookId012345678901",
            content=b"",
            headers={"Content-Type": "application/octet-stream"},
        )
        assert empty.status_code == 400
    run = wait_for_runs(server, "upload", 1)[0]
    with client(server, "upload") as api:
        outputs = api.get(f"/v1/workflows/run/{run['id']}").json()["outputs"]
    assert outputs["note"] == "monthly"
    assert outputs["doc"]["filename"] == "report.txt" and outputs["doc"]["size"] == 11
    assert outputs["doc"]["transfer_method"] == "local_file"
    run = wait_for_runs(server, "blob", 1)[0]
    with client(server, "blob") as api:
        outputs = api.get(f"/v1/workflows/run/{run['id']}").json()["outputs"]
    assert outputs["payload"]["size"] == 8
