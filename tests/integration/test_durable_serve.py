"""`firstgate serve` without a broker, killed mid-run: started again on the same
state database, it resumes the run from its last checkpoint (the finished nodes
are not run again), or, when the app changed meanwhile, ends it `failed` saying
so. Real processes, a real SQLite file, real HTTP nodes against a loopback target
that counts every request."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.durable_support import CHAIN_KEY, runs_per_node, settings_file, write_chain
from tests.fakes.http_target import HttpTarget
from tests.serve_support import serve

CHAIN = 30
KEYS = {"chain": CHAIN_KEY}


@pytest.fixture
def target() -> Iterator[HttpTarget]:
    with HttpTarget() as server:
        yield server


def _client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {CHAIN_KEY}"}, timeout=30)


def _start_and_kill(tmp: Path, apps: Path, target: HttpTarget, kill_at: str) -> tuple[str, int]:
    """Start a run on a fresh serve, SIGKILL the server once `kill_at` has started;
    the run's id and how many events the client saw."""
    extra = ("--durability", "node", "--models", str(settings_file(tmp, target)))
    body = {"inputs": {}, "user": "u", "response_mode": "streaming"}
    seen = 0
    with (
        serve(tmp, "http://127.0.0.1:9", apps=apps, extra=extra, keys=KEYS) as server,
        _client(server.url) as http,
        http.stream("POST", "/v1/workflows/run", json=body) as reply,
    ):
        run_id = None
        for line in reply.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            seen += 1
            run_id = run_id or event.get("workflow_run_id")
            if event["event"] == "node_started" and event["data"]["node_id"] == kill_at:
                give_up = time.monotonic() + 10
                while not runs_per_node(target)[kill_at] and time.monotonic() < give_up:
                    time.sleep(0.005)  # its request is on its way: kill it in flight
                server.process.kill()
                server.process.wait()
                break
    assert run_id is not None
    return run_id, seen


def _wait_for_end(url: str, run_id: str) -> dict:
    give_up = time.monotonic() + 60
    with _client(url) as http:
        while time.monotonic() < give_up:
            record = http.get(f"/v1/workflows/run/{run_id}")
            if record.status_code == 200 and record.json()["status"] not in ("running", "paused"):
                return record.json()
            time.sleep(0.1)
    raise AssertionError("the run did not end after the restart")


def test_a_run_interrupted_by_a_crash_resumes_when_serve_starts_again(
    tmp_path: Path, target: HttpTarget
) -> None:
    apps = tmp_path / "apps"
    write_chain(apps, target, CHAIN, delay=0.05)
    run_id, _ = _start_and_kill(tmp_path, apps, target, kill_at="h12")
    before = runs_per_node(target)
    assert before["h12"] == 1 and "h13" not in before  # killed in h12
    extra = ("--durability", "node", "--models", str(settings_file(tmp_path, target)))
    with serve(tmp_path, "http://127.0.0.1:9", apps=apps, extra=extra, keys=KEYS) as again:
        record = _wait_for_end(again.url, run_id)
    assert record["status"] == "succeeded", record
    assert record["outputs"] == {"status": 200}
    counts = runs_per_node(target)
    assert set(counts) == {f"h{i}" for i in range(1, CHAIN + 1)}
    twice = {node for node, n in counts.items() if n > 1}
    assert twice <= {"h12"}  # at most the node in flight ran twice; finished ones once
    assert all(n <= 2 for n in counts.values())


def test_a_run_of_an_app_changed_meanwhile_ends_failed_saying_so(
    tmp_path: Path, target: HttpTarget
) -> None:
    apps = tmp_path / "apps"
    write_chain(apps, target, CHAIN, delay=0.05)
    run_id, _ = _start_and_kill(tmp_path, apps, target, kill_at="h5")
    write_chain(apps, target, CHAIN, delay=0.06)  # the app changed while nothing ran
    extra = ("--durability", "node", "--models", str(settings_file(tmp_path, target)))
    with serve(tmp_path, "http://127.0.0.1:9", apps=apps, extra=extra, keys=KEYS) as again:
        record = _wait_for_end(again.url, run_id)
    assert record["status"] == "failed"
    assert "changed since its checkpoint" in record["error"]
    assert "h6" not in runs_per_node(target)  # nothing of it ran again
