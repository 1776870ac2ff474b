"""Triggers with `serve --broker`: real Redis, a real `firstgate worker`, two
real API processes, the real PostgreSQL. A webhook call to either API process
is queued and runs on the worker; a schedule both API processes run fires
each tick exactly once (the Redis claim per tick, `Runs.claim_tick`).

The schedule ticks every second (`FIRSTGATE_SCHEDULE_SECONDS=1`, test-only:
a leading seconds field; the rest is the code a five-field schedule runs).
Each tick's claim key stays in Redis, so the test compares three counts:
ticks claimed, runs recorded, and seconds that passed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from firstgate.runtime.workflow import derive_app_id
from firstgate.store import open_store
from firstgate.store.base import RunRecord

from tests.integration.test_triggers_serve import BARE_APP, CORPUS, DIFY_ID, HEADERS, TICK_APP
from tests.postgres_support import (  # noqa: F401 - fixtures
    fresh_database,
    postgres_server,
)
from tests.redis_support import free_port, redis_server, worker
from tests.serve_support import ROOT, Server, serve

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("FIRSTGATE_GEVENT") == "1", reason="the processes run gevent in both passes"
    ),
]
KEYS = {
    "orders": "orders-key-0123456789",
    "tick": "tick-key-0123456789",
    "bare": "bare-key-01234567",
}
NO_MODEL = "http://127.0.0.1:9/v1"  # never dialled: no node calls a model


class Cluster:
    def __init__(self, broker: str, a: Server, b: Server, database: str) -> None:
        self.broker = broker
        self.a = a
        self.b = b
        self.database = database


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: str,  # noqa: F811 - the fixture
) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("trigger-cluster")
    apps = tmp / "apps"
    apps.mkdir()
    shutil.copy(CORPUS / "trigger_webhook_workflow.yml", apps / "orders.yml")
    (apps / "tick.yml").write_text(TICK_APP)
    (apps / "bare.yml").write_text(BARE_APP)
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    env = {"FIRSTGATE_SCHEDULE_SECONDS": "1"}
    with fresh_database(postgres_server) as database, redis_server(tmp / "redis") as broker:
        api = ("--broker", broker.url)
        with (
            worker(tmp, NO_MODEL, broker.url, database, apps=apps, keys=KEYS, env=env),
            serve(
                tmp / "a", NO_MODEL, apps=apps, database=database, extra=api, env=env, keys=KEYS
            ) as a,
            serve(
                tmp / "b", NO_MODEL, apps=apps, database=database, extra=api, env=env, keys=KEYS
            ) as b,
        ):
            yield Cluster(broker.url, a, b, database)


def runs_of(server: Server, app: str) -> list[dict]:
    headers = {"Authorization": f"Bearer {KEYS[app]}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as api:
        reply = api.get("/v1/workflows/logs", params={"limit": 100})
        assert reply.status_code == 200, reply.text
        return [entry["workflow_run"] for entry in reply.json()["data"]]


def test_a_webhook_call_is_queued_and_runs_on_a_worker(cluster: Cluster) -> None:
    with httpx.Client(base_url=cluster.a.url, timeout=30) as caller:
        reply = caller.post(
            f"/triggers/webhook/{DIFY_ID}",
            json={"event": "shipped", "amount": 3, "tags": []},
            headers=HEADERS,
        )
        refused = caller.post(f"/triggers/webhook/{DIFY_ID}", json={"amount": 3}, headers=HEADERS)
    assert reply.status_code == 202 and reply.json() == {"received": True}
    assert refused.status_code == 400  # checked by the API process, nothing queued
    give_up = time.monotonic() + 30
    while time.monotonic() < give_up:
        done = [r for r in runs_of(cluster.b, "orders") if r["status"] == "succeeded"]
        if done:
            break
        time.sleep(0.2)
    assert len(done) == 1, runs_of(cluster.b, "orders")
    headers = {"Authorization": f"Bearer {KEYS['orders']}"}
    with httpx.Client(base_url=cluster.b.url, headers=headers, timeout=30) as api:
        record = api.get(f"/v1/workflows/run/{done[0]['id']}").json()
    assert record["outputs"]["summary"].startswith("shipped of 3")
    # The worker recorded how the queued run was started.
    assert done[0]["triggered_from"] == "webhook"


def recorded_ticks(database: str) -> list[RunRecord]:
    store = open_store(database)
    try:
        app_id = derive_app_id("workflow", "Ticker", "tick")
        page, _ = store.run_page(
            app_id=app_id,
            status=None,
            keyword=None,
            created_after=None,
            created_before=None,
            page=1,
            limit=100,
        )
        return page
    finally:
        store.close()


def test_two_api_processes_fire_each_tick_once(cluster: Cluster) -> None:
    """Last in the module: it stops both API processes (so no tick comes after the count)."""
    give_up = time.monotonic() + 30
    while time.monotonic() < give_up and len(runs_of(cluster.a, "tick")) < 2:
        time.sleep(0.2)
    time.sleep(4)
    for server in (cluster.a, cluster.b):
        server.process.send_signal(signal.SIGTERM)
    for server in (cluster.a, cluster.b):
        server.process.wait(timeout=60)
    stopped = time.time()
    # The worker finishes what was queued; then nothing changes any more.
    give_up, last = time.monotonic() + 30, -1
    while time.monotonic() < give_up:
        runs = recorded_ticks(cluster.database)
        if len(runs) == last and all(r.status != "running" for r in runs):
            break
        last = len(runs)
        time.sleep(1)
    client = redis.Redis.from_url(cluster.broker)
    try:
        keys = [k.decode() for k in client.keys("firstgate:tick:*")]
        owners = {client.get(k) for k in keys}
    finally:
        client.close()
    epochs = sorted(int(k.rsplit(":", 1)[1]) for k in keys)
    # A claim per tick that passed while the schedulers ran, never two...
    assert 5 <= len(epochs) == len(set(epochs)) <= stopped - epochs[0] + 1
    # ...and each claimed tick is exactly one run, executed on the worker.
    assert len(runs) == len(keys), (len(runs), len(keys))
    assert all(r.status == "succeeded" for r in runs)
    assert {r.triggered_from for r in runs} == {"schedule"}
    assert None not in owners


def tick_claims(broker: str) -> dict[int, str]:
    """Each claimed tick's epoch and the process that claimed it."""
    client = redis.Redis.from_url(broker)
    try:
        claims = {k.decode(): client.get(k) for k in client.keys("firstgate:tick:*")}
    finally:
        client.close()
    return {int(k.rsplit(":", 1)[1]): (v or b"").decode() for k, v in claims.items()}


def settled_ticks(database: str) -> list[RunRecord]:
    """The tick runs once nothing changes any more (the worker finished what was queued)."""
    give_up, last, runs = time.monotonic() + 30, -1, []
    while time.monotonic() < give_up:
        runs = recorded_ticks(database)
        if len(runs) == last and all(r.status != "running" for r in runs):
            break
        last = len(runs)
        time.sleep(1)
    return runs


def test_gunicorn_with_two_workers_fires_each_tick_once(
    tmp_path: Path,
    postgres_server: str,  # noqa: F811 - the fixture
) -> None:
    """The production entry point (`serve/wsgi.py` under `serve/gunicorn_conf.py`)
    with `FIRSTGATE_BROKER` and two gunicorn workers: each worker process runs the
    schedule, and each tick runs once, on the Celery worker."""
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "tick.yml").write_text(TICK_APP)
    keys = {"tick": KEYS["tick"]}
    env = {"FIRSTGATE_SCHEDULE_SECONDS": "1"}
    with (
        fresh_database(postgres_server) as database,
        redis_server(tmp_path / "redis") as broker,
        worker(tmp_path, NO_MODEL, broker.url, database, apps=apps, keys=keys, env=env),
    ):
        port = free_port()
        environ = {
            **{k: v for k, v in os.environ.items() if not k.startswith("FIRSTGATE_APP_KEY_")},
            **env,
            "FIRSTGATE_APPS_DIR": str(apps),
            "FIRSTGATE_DATABASE_URL": database,
            "FIRSTGATE_BROKER": broker.url,
            "FIRSTGATE_HTTP_WORKERS": "2",
            "FIRSTGATE_BIND": f"127.0.0.1:{port}",
            "FIRSTGATE_GRACE": "2",
            "FIRSTGATE_APP_KEY_TICK": KEYS["tick"],
            "PYTHONUNBUFFERED": "1",  # each worker's start lines reach the log at once
        }
        command = [
            str(Path(sys.executable).with_name("gunicorn")),
            "-c",
            "python:firstgate.serve.gunicorn_conf",
            "firstgate.serve.wsgi:application()",
        ]
        log = tmp_path / "gunicorn.log"
        with log.open("w") as sink:
            process = subprocess.Popen(command, cwd=ROOT, env=environ, stdout=sink, stderr=sink)
        try:
            give_up = time.monotonic() + 60
            # Both workers have built the service and started its schedule.
            while log.read_text().count("schedule of Ticker (tick)") < 2:
                assert process.poll() is None and time.monotonic() < give_up, log.read_text()
                time.sleep(0.1)
            booted = time.time()
            while time.time() < booted + 5:
                assert process.poll() is None, log.read_text()
                time.sleep(0.2)
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0, log.read_text()
        stopped = time.time()
        text = log.read_text()
        assert text.count("Booting worker") == 2, text
        workers = {
            int(line.rsplit("pid: ", 1)[1])
            for line in text.splitlines()
            if "Booting worker with pid: " in line
        }
        runs = settled_ticks(database)
        claims = tick_claims(broker.url)
    epochs = sorted(claims)
    # A claim per tick that passed while the two schedulers ran, each claimed once
    # (a key per tick: a tick fired twice would be two runs for one key)...
    assert 4 <= len(epochs) <= stopped - epochs[0] + 1, epochs
    assert len(runs) == len(claims), (len(runs), len(claims))
    # ...claimed by the gunicorn workers, each run started by the schedule.
    assert {int(owner.rsplit(":", 1)[1]) for owner in claims.values()} <= workers
    assert all(r.status == "succeeded" and r.triggered_from == "schedule" for r in runs)
