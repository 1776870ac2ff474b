"""Broker mode, a chatflow turn whose worker is SIGKILLed mid-turn (the workers
stand for two machines: each sees its own host name, so the dead one's holds in
the store cannot be seen to be gone): the other worker resumes the turn at
once, taking over the conversation's hold that the turn's first attempt left
(the same turn), long before that hold would lapse; a second turn of the
conversation, sent meanwhile, waits for the resumed one and sees its answer.
Real Redis, PostgreSQL, worker and API processes."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from firstgate.store import open_store

from tests.durable_support import chain_app, runs_per_node, settings_file
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

KEY = "talk-key-0123456789"
CHAIN = 40
# The run's time limit sets the conversation's hold: this plus the engine's 60 s
# margin, long beside the broker's 1 s lease that finds the dead worker.
TIME_LIMIT = "30"


@pytest.fixture
def target() -> Iterator[HttpTarget]:
    with HttpTarget() as server:
        yield server


def _chat_chain(target: HttpTarget) -> dict[str, Any]:
    """start -> h1 ... h<CHAIN> (each a GET of the target) -> answer."""
    app = chain_app(target.url, CHAIN, delay=0.03)
    app["app"] = {"mode": "advanced-chat", "name": "talk"}
    nodes = app["workflow"]["graph"]["nodes"]
    nodes[-1] = {
        "id": "end",
        "data": {
            "type": "answer",
            "title": "Answer",
            "answer": f"done {{{{#h{CHAIN}.status_code#}}}}",
        },
    }
    return app


def _lease_expiry(database: str, conversation_id: str) -> tuple[str, float] | None:
    store = open_store(database)
    try:
        with store.db.read() as tx:  # type: ignore[attr-defined]
            row = tx.execute(
                "SELECT owner, expires_at FROM conversation_leases WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
    finally:
        store.close()
    return (str(row[0]), float(row[1])) if row else None


def test_a_killed_chat_turn_resumes_at_once_holding_its_own_conversation(
    tmp_path: Path,
    target: HttpTarget,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "talk.yml").write_text(json.dumps(_chat_chain(target)))
    settings = settings_file(tmp_path, target)
    lease = ("--lease", "1", "--visibility-timeout", "4", "--max-attempts", "2")
    durable = ("--durability", "node", "--models", str(settings), "--time-limit", TIME_LIMIT)
    keys = {"talk": KEY}
    first_turn = {"inputs": {}, "query": "one", "user": "u", "response_mode": "streaming"}
    seen: list[dict[str, Any]] = []
    with redis_server(tmp_path / "redis") as broker:
        client = redis.Redis.from_url(broker.url)
        common = dict(apps=apps, extra=(*lease, *durable), keys=keys)
        nowhere = "http://127.0.0.1:9"
        with (
            worker(
                tmp_path, nowhere, broker.url, postgres_url, name="w1", host="w1", **common
            ) as w1,
            worker(
                tmp_path, nowhere, broker.url, postgres_url, name="w2", host="w2", **common
            ) as w2,
            serve(
                tmp_path,
                nowhere,
                apps=apps,
                database=postgres_url,
                extra=("--broker", broker.url, *lease, *durable),
                keys=keys,
                env={"FIRSTGATE_SSE_PING_S": "0.5"},
            ) as api,
            httpx.Client(
                base_url=api.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120
            ) as http,
        ):
            # A conversation with one turn answered (a new one is unknown until its end).
            opening = http.post(
                "/v1/chat-messages", json={**first_turn, "response_mode": "blocking"}
            )
            assert opening.status_code == 200, opening.text
            first_turn["conversation_id"] = opening.json()["conversation_id"]
            hold: tuple[str, float] | None = None
            second: list[tuple[float, dict[str, Any]]] = []
            sender: threading.Thread | None = None
            ended_at = 0.0
            with http.stream("POST", "/v1/chat-messages", json=first_turn) as reply:
                for _, event in frames(reply):
                    if event == "ping":
                        continue
                    seen.append(event)
                    data = event.get("data", {})
                    if (
                        hold is None
                        and event["event"] == "node_started"
                        and data.get("node_id") == "h20"
                    ):
                        give_up = time.monotonic() + 10
                        while not runs_per_node(target)["h20"] and time.monotonic() < give_up:
                            time.sleep(0.005)
                        conversation = event["conversation_id"]
                        hold = _lease_expiry(postgres_url, conversation)
                        owner = client.hget(f"firstgate:run:{event['task_id']}", "owner")
                        victim = w1 if owner and owner.decode().startswith("w1") else w2
                        victim.kill()
                        # Another turn of the same conversation, sent now: it must wait.
                        sender = threading.Thread(
                            target=_second_turn, args=(http, conversation, second)
                        )
                        sender.start()
                    if event["event"] == "message_end":
                        ended_at = time.time()
            assert sender is not None
            sender.join(120)
    names = [e["event"] for e in seen]
    assert hold is not None, names
    assert names.count("workflow_started") == 2, seen[-3:]  # the first, and the resumption
    assert names[-1] == "message_end" and names.count("workflow_finished") == 1, names
    assert seen[-2]["data"]["status"] == "succeeded", seen[-2]
    answer = "".join(e.get("answer", "") for e in seen if e["event"] == "message")
    assert answer == "done 200"
    # Resumed under the first attempt's own hold, not after it lapsed.
    owner, expires_at = hold
    assert ended_at < expires_at, (ended_at, expires_at)
    # The other turn waited for it: its first node ran after the first turn's last.
    assert second and second[-1][1]["event"] == "message_end", [e["event"] for _, e in second]
    order = [r["query"].get("node") for r in target.requests if r["path"] == "/slow"]
    assert order.count("h1") == 3, order  # the opening turn, the killed one, the other
    killed = order.index("h1", 1)
    assert order.index(f"h{CHAIN}", killed) < order.index("h1", killed + 1), order


def _second_turn(
    http: httpx.Client, conversation_id: str, found: list[tuple[float, dict[str, Any]]]
) -> None:
    body = {
        "inputs": {},
        "query": "two",
        "user": "u",
        "response_mode": "streaming",
        "conversation_id": conversation_id,
    }
    with http.stream("POST", "/v1/chat-messages", json=body) as reply:
        for _, event in frames(reply):
            if isinstance(event, dict):
                found.append((time.time(), event))
