"""Broker mode, a worker SIGKILLed in the middle of a 100-node chain: once its
lease lapses the other worker resumes the run from its last checkpoint. Finished
nodes are not run again (a loopback target counts every node's requests), the
stream goes on under the same run and task ids with positions in order,
`Last-Event-ID` reads across the resume, and the client sees one
`workflow_finished`. Real Redis, real worker processes, real PostgreSQL."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.durable_support import CHAIN_KEY, runs_per_node, settings_file, write_chain
from tests.fakes.http_target import HttpTarget
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

CHAIN = 100
KEYS = {"chain": CHAIN_KEY}


@pytest.fixture
def target() -> Iterator[HttpTarget]:
    with HttpTarget() as server:
        yield server


def _holder(client: redis.Redis, task_id: str) -> str:
    owner = client.hget(f"firstgate:run:{task_id}", "owner")
    assert owner, "no worker holds the run"
    return owner.decode().split(":")[0]


def test_a_worker_killed_mid_chain_resumes_on_the_other(
    tmp_path: Path,
    target: HttpTarget,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    apps = tmp_path / "apps"
    write_chain(apps, target, CHAIN, delay=0.03)
    settings = settings_file(tmp_path, target)
    lease = ("--lease", "1", "--visibility-timeout", "4", "--max-attempts", "2")
    durable = ("--durability", "node", "--models", str(settings))
    body = {"inputs": {}, "user": "u", "response_mode": "streaming"}
    seen: list[tuple[int | None, dict]] = []
    with redis_server(tmp_path / "redis") as broker:
        client = redis.Redis.from_url(broker.url)
        common = dict(apps=apps, extra=(*lease, *durable), keys=KEYS)
        with (
            worker(
                tmp_path, "http://127.0.0.1:9", broker.url, postgres_url, name="w1", **common
            ) as w1,
            worker(
                tmp_path, "http://127.0.0.1:9", broker.url, postgres_url, name="w2", **common
            ) as w2,
            serve(
                tmp_path,
                "http://127.0.0.1:9",
                apps=apps,
                database=postgres_url,
                extra=("--broker", broker.url, *lease, *durable),
                keys=KEYS,
                env={"FIRSTGATE_SSE_PING_S": "0.5"},
            ) as api,
            httpx.Client(
                base_url=api.url, headers={"Authorization": f"Bearer {CHAIN_KEY}"}, timeout=60
            ) as http,
        ):
            killed_in = None
            with http.stream("POST", "/v1/workflows/run", json=body) as reply:
                for event_id, event in frames(reply):
                    if event == "ping":
                        continue
                    seen.append((event_id, event))
                    data = event.get("data", {})
                    if (
                        killed_in is None
                        and event["event"] == "node_started"
                        and data.get("node_id") == "h50"
                    ):
                        give_up = time.monotonic() + 10
                        while not runs_per_node(target)["h50"] and time.monotonic() < give_up:
                            time.sleep(0.005)
                        holder = _holder(client, event["task_id"])
                        victim = w1 if holder in w1.output() else w2
                        victim.kill()
                        killed_in = "h50"
            task_id, run_id = seen[0][1]["task_id"], seen[0][1]["workflow_run_id"]
            attempts = int(client.hget(f"firstgate:run:{task_id}", "attempts") or 0)
            # Last-Event-ID across the resume: from an event the first worker sent.
            cut = next(i for i, (_, e) in enumerate(seen) if e["event"] == "node_started")
            with http.stream(
                "GET",
                f"/v1/workflow/{run_id}/events",
                params={"user": "u"},
                headers={"Last-Event-ID": str(seen[cut][0])},
            ) as again:
                rest = [(i, e) for i, e in frames(again) if e != "ping"]
            record = http.get(f"/v1/workflows/run/{run_id}").json()
    events = [e for _, e in seen]
    names = [e["event"] for e in events]
    assert killed_in == "h50"
    assert names.count("workflow_finished") == 1 and names[-1] == "workflow_finished"
    assert events[-1]["data"]["status"] == "succeeded", events[-1]
    assert {e["task_id"] for e in events} == {task_id}
    assert {e["workflow_run_id"] for e in events if "workflow_run_id" in e} == {run_id}
    assert [i for i, _ in seen] == list(range(1, len(seen) + 1))  # positions in order
    assert names.count("workflow_started") == 2  # the first, and the resumption
    resumed = names.index("workflow_started", 1)
    assert events[resumed]["data"]["reason"] == "resumption"
    assert attempts == 2  # --max-attempts counts the resume
    # Nothing that finished before the kill ran again: at most the node in flight.
    counts = runs_per_node(target)
    assert set(counts) == {f"h{i}" for i in range(1, CHAIN + 1)}
    twice = sorted(node for node, n in counts.items() if n > 1)
    assert twice in ([], ["h50"]), twice
    finished_first = {
        e["data"]["node_id"] for e in events[:resumed] if e["event"] == "node_finished"
    }
    started_after = [e["data"]["node_id"] for e in events[resumed:] if e["event"] == "node_started"]
    assert not finished_first & set(started_after)
    assert started_after[0] == "h50"
    # The stream read again from before the kill is what the client saw after that point.
    assert [e for _, e in rest] == [e for _, e in seen[cut + 1 :]]
    assert record["status"] == "succeeded" and record["total_steps"] >= CHAIN + 2
    print(f"resumed after the kill; ran twice: {twice or 'none'}")
