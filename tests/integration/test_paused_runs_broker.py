"""Paused runs in broker mode, where the store is the truth and Redis only a cache:
a run paused longer than Redis keeps its keys still resumes when its form is
submitted (or times out), on a worker, under the same ids; a stop of a paused
run (which no worker holds to hear it) ends it at once, from whichever API
process receives it: `stopped` in the store, its checkpoint gone, its form
closed, its stream ended. Real Redis, PostgreSQL, worker and API processes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from firstgate.serve.distributed.run_state import (
    RunStore,
    events_key,
    lease_key,
    run_id_key,
    run_key,
    stop_key,
)
from firstgate.store import open_store

from tests.integration.test_distributed import frames
from tests.integration.test_human_input_broker import (
    CORPUS,
    KEY,
    KEYS,
    NO_MODEL,
    _answer,
    _queued,
)
from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.redis_support import redis_server, worker
from tests.serve_support import Server, serve

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("FIRSTGATE_GEVENT") == "1", reason="the processes run gevent in both passes"
    ),
]

DURABLE = ("--durability", "node")
BODY = {"inputs": {"topic": "tea"}, "response_mode": "streaming", "user": "ann"}
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
CHAT_KEY = "ask-key-0123456789"


def _client(url: str, key: str = KEY) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _events(reply: httpx.Response, within: float = 60.0) -> list[tuple[int, dict[str, Any]]]:
    give_up = time.monotonic() + within
    found: list[tuple[int, dict[str, Any]]] = []
    for event_id, event in frames(reply):
        assert time.monotonic() < give_up, [e["event"] for _, e in found]
        if isinstance(event, dict) and event_id is not None:
            found.append((event_id, event))
    return found


@contextmanager
def _deployment(
    tmp_path: Path, database: str, *, apis: int = 1, extra: tuple[str, ...] = ()
) -> Iterator[tuple[redis.Redis, list[Server]]]:
    """Redis, one worker, `apis` API processes, on the review and chat apps."""
    apps = tmp_path / "apps"
    apps.mkdir(exist_ok=True)
    (apps / "review.yml").write_text(CORPUS.read_text())
    (apps / "ask.yml").write_text(CHAT)
    keys = {**KEYS, "ask": CHAT_KEY}
    with ExitStack() as stack:
        broker = stack.enter_context(redis_server(tmp_path / "redis"))
        client = redis.Redis.from_url(broker.url)
        stack.callback(client.close)
        stack.enter_context(
            worker(tmp_path, NO_MODEL, broker.url, database, apps=apps, extra=DURABLE, keys=keys)
        )
        servers = [
            stack.enter_context(
                serve(
                    tmp_path,
                    NO_MODEL,
                    apps=apps,
                    database=database,
                    extra=("--broker", broker.url, *DURABLE, *extra),
                    keys=keys,
                    env={"FIRSTGATE_SSE_PING_S": "0.5"},
                )
            )
            for _ in range(apis)
        ]
        yield client, servers


def _pause(http: httpx.Client, client: redis.Redis, path: str, body: dict[str, Any]) -> Any:
    """Start a run, read it to its pause, wait until its worker has let it go."""
    with http.stream("POST", path, json=body) as reply:
        assert reply.status_code == 200, reply.read()
        first = _events(reply)
    names = [e["event"] for _, e in first]
    assert names[-2:] == ["human_input_required", "workflow_paused"], names
    task_id = first[0][1]["task_id"]
    give_up = time.monotonic() + 10
    while client.hget(run_key(task_id), "state") != b"paused":
        assert time.monotonic() < give_up, client.hgetall(run_key(task_id))
        time.sleep(0.02)
    return first


def _forget(client: redis.Redis, task_id: str, run_id: str) -> None:
    """What Redis knows of the run, gone (as its keys' time to live would do)."""
    keys = [run_key(task_id), events_key(task_id), lease_key(task_id), stop_key(task_id)]
    client.delete(*keys, run_id_key(run_id))
    assert not client.exists(*keys, run_id_key(run_id))


def _follow(http: httpx.Client, run_id: str, **flags: str) -> list[tuple[int, dict[str, Any]]]:
    query = {"user": "ann", "continue_on_pause": "true", **flags}
    with http.stream("GET", f"/v1/workflow/{run_id}/events", params=query) as reply:
        assert reply.status_code == 200, reply.read()
        return _events(reply)


def _known_again(client: redis.Redis, run_id: str) -> None:
    """Wait until the run is in Redis again (a deadline sweep revives it)."""
    give_up = time.monotonic() + 30
    while not client.exists(run_id_key(run_id)):
        assert time.monotonic() < give_up, "the run was not revived"
        time.sleep(0.05)


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


def test_a_run_whose_redis_keys_are_gone_resumes_when_its_form_is_submitted(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    with _deployment(tmp_path, postgres_url) as (client, [api]), _client(api.url) as http:
        first = _pause(http, client, "/v1/workflows/run", BODY)
        task_id, run_id = first[0][1]["task_id"], first[-1][1]["workflow_run_id"]
        token = first[-2][1]["data"]["form_token"]
        paused_at = first[-1][0]
        _forget(client, task_id, run_id)
        answer = _answer(http)
        accepted = http.post(
            f"/v1/form/human_input/{token}",
            json={"inputs": answer, "action": "apply_edit", "user": "ann"},
        )
        assert accepted.status_code == 200, accepted.text
        rest = _follow(http, run_id)
        replayed = _follow(http, run_id, include_state_snapshot="true")
        record = http.get(f"/v1/workflows/run/{run_id}").json()
        again = http.post(
            f"/v1/form/human_input/{token}",
            json={"inputs": answer, "action": "approve", "user": "ann"},
        )
    names = [e["event"] for _, e in rest]
    assert names[:2] == ["workflow_started", "human_input_form_filled"], names
    assert names.count("workflow_finished") == 1 and names[-1] == "workflow_finished"
    assert rest[-1][1]["data"]["status"] == "succeeded"
    assert rest[-1][1]["data"]["outputs"] == {"text": "my edits", "action": "Use my edits"}
    assert {e["task_id"] for _, e in rest} == {task_id}
    assert {e["workflow_run_id"] for _, e in rest if "workflow_run_id" in e} == {run_id}
    # The stream, written anew, goes on from the run's position in the store (its
    # ids too); the state snapshot stands for the events before it, as after a
    # restart in-process.
    assert [i for i, _ in rest] == list(range(paused_at + 1, paused_at + 1 + len(rest)))
    live = [e for _, e in rest]
    assert [e for _, e in replayed[-len(live) :]] == live
    assert [i for i, _ in replayed[-len(live) :]] == list(
        range(paused_at + 1, paused_at + 1 + len(live))
    )
    assert replayed[0][1]["event"] == "node_finished"
    assert record["status"] == "succeeded"
    assert again.status_code == 412 and again.json()["code"] == "human_input_form_submitted"


def test_a_form_that_times_out_after_the_runs_redis_keys_are_gone_resumes_it(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    often = ("--form-sweep-interval", "0.2")
    with (
        _deployment(tmp_path, postgres_url, extra=often) as (client, [api]),
        _client(api.url) as http,
    ):
        first = _pause(http, client, "/v1/workflows/run", BODY)
        task_id, run_id = first[0][1]["task_id"], first[-1][1]["workflow_run_id"]
        _forget(client, task_id, run_id)
        _expire(postgres_url, first[-2][1]["data"]["form_token"])
        _known_again(client, run_id)
        rest = _follow(http, run_id)
        record = http.get(f"/v1/workflows/run/{run_id}").json()
    names = [e["event"] for _, e in rest]
    assert names[:2] == ["workflow_started", "human_input_form_timeout"], names
    assert names.count("workflow_finished") == 1 and names[-1] == "workflow_finished"
    assert {e["task_id"] for _, e in rest} == {task_id}
    assert record["status"] == "succeeded" and record["outputs"] == {"outcome": "__timeout"}


def _stop_as_ann(http: httpx.Client, client: redis.Redis, path: str, task_id: str) -> None:
    """Bob's stop leaves ann's paused run paused; hers ends it before the reply."""
    wrong_user = http.post(path, json={"user": "bob"})
    assert wrong_user.status_code == 200
    assert client.hget(run_key(task_id), "state") == b"paused"  # not bob's to stop
    stopped = http.post(path, json={"user": "ann"})
    assert stopped.status_code == 200 and stopped.json() == {"result": "success"}
    # At once: by the time the reply came, the run had ended.
    assert client.hget(run_key(task_id), "state") == b"finished"


def _late_answer(http: httpx.Client, token: str) -> httpx.Response:
    return http.post(
        f"/v1/form/human_input/{token}",
        json={"inputs": {"note": "late"}, "action": "ok", "user": "ann"},
    )


@pytest.mark.parametrize("chat", [False, True], ids=["workflow", "chatflow"])
def test_a_paused_run_stopped_through_another_api_process_ends_at_once(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811 - the fixture
    chat: bool,
) -> None:
    key, path, stop = KEY, "/v1/workflows/run", "/v1/workflows/tasks/{}/stop"
    body: dict[str, Any] = dict(BODY)
    if chat:
        key, path, stop = CHAT_KEY, "/v1/chat-messages", "/v1/chat-messages/{}/stop"
        body = {"inputs": {}, "query": "hello", "user": "ann", "response_mode": "streaming"}
    with (
        _deployment(tmp_path, postgres_url, apis=2) as (client, [one, two]),
        _client(one.url, key) as first_api,
        _client(two.url, key) as second_api,
    ):
        first = _pause(first_api, client, path, body)
        task_id, run_id = first[0][1]["task_id"], first[-1][1]["workflow_run_id"]
        token = first[-2][1]["data"]["form_token"]
        _stop_as_ann(second_api, client, stop.format(task_id), task_id)
        rest = _follow(first_api, run_id)
        record = first_api.get(f"/v1/workflows/run/{run_id}").json()
        late = _late_answer(first_api, token)
        shown = first_api.get(f"/v1/form/human_input/{token}")
    store = open_store(postgres_url)
    try:
        checkpoint = store.checkpoint(run_id)
        kept = store.run(run_id)
    finally:
        store.close()
    ended = [e for _, e in rest if e["event"] == "workflow_finished"]
    assert [e["data"]["status"] for e in ended] == ["stopped"], [e["event"] for _, e in rest]
    assert ended[0]["workflow_run_id"] == run_id and ended[0]["task_id"] == task_id
    if chat:
        assert rest[-1][1]["event"] == "message_end"
    assert checkpoint is None
    assert kept is not None and kept.status == "stopped"
    assert record["status"] == "stopped"
    assert late.status_code == 412 and late.json()["code"] == "human_input_form_submitted"
    assert shown.status_code == 412


def test_a_paused_run_whose_redis_keys_are_gone_is_stopped_by_its_task_id(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    """The stop names the task; Redis has forgotten it: the store knows the task of
    the paused run, which is written to Redis again and ended as any paused run."""
    stop = "/v1/workflows/tasks/{}/stop"
    with _deployment(tmp_path, postgres_url) as (client, [api]), _client(api.url) as http:
        first = _pause(http, client, "/v1/workflows/run", BODY)
        task_id, run_id = first[0][1]["task_id"], first[-1][1]["workflow_run_id"]
        token = first[-2][1]["data"]["form_token"]
        _forget(client, task_id, run_id)
        _stop_as_ann(http, client, stop.format(task_id), task_id)  # written to Redis again
        rest = _follow(http, run_id)
        record = http.get(f"/v1/workflows/run/{run_id}").json()
        late = _late_answer(http, token)
    ended = [e for _, e in rest if e["event"] == "workflow_finished"]
    assert [e["data"]["status"] for e in ended] == ["stopped"], [e["event"] for _, e in rest]
    assert ended[0]["task_id"] == task_id
    # The stream written anew goes on from the run's position in the store.
    assert rest[0][0] == first[-1][0] + 1
    assert record["status"] == "stopped"
    assert late.status_code == 412 and late.json()["code"] == "human_input_form_submitted"


def test_a_stop_asked_while_its_worker_pauses_the_run_is_left_to_that_worker(
    tmp_path: Path,
) -> None:
    with redis_server(tmp_path / "redis") as broker:
        client = redis.Redis.from_url(broker.url)
        store = RunStore(client, keep_finished=60)
        try:
            _queued(store, "t1")
            assert store.claim("t1", "w:1", 10, 3) == "claimed"
            # Running: the flag is for its holder, nobody else takes it.
            assert store.request_stop("t1", "stop it", "api:1", 10) is False
            assert store.meta("t1")["owner"] == "w:1"
            # Its holder, letting it go, finds the stop: it keeps it to end it.
            assert store.pause("t1", "w:1", "") == "stop"
            assert store.meta("t1")["state"] == "running"
            assert store.publish("t1", "w:1", "end")
            # Paused, then stopped: the stopper holds it (with a lease, as a worker).
            _queued(store, "t2")
            assert store.claim("t2", "w:1", 10, 3) == "claimed"
            assert store.pause("t2", "w:1", "") == "paused"
            assert store.request_stop("t2", "stop it", "api:1", 10) is True
            assert store.meta("t2")["owner"] == "api:1"
            assert client.get(lease_key("t2")) == b"api:1"
            assert store.reopen("t2", "form-a") == "pending"  # a late form queues nothing
            assert store.claim("t2", "w:2", 10, 3) == "busy"
            assert store.publish("t2", "api:1", "end")
            assert store.request_stop("t2", "again", "api:2", 10) is False
        finally:
            client.close()


def test_a_run_is_written_again_only_when_redis_no_longer_knows_it(tmp_path: Path) -> None:
    fields = {"request": "{}", "workflow_run_id": "r1", "state": "queued", "seq": "8", "first": "8"}
    with redis_server(tmp_path / "redis") as broker:
        client = redis.Redis.from_url(broker.url)
        store = RunStore(client, keep_finished=60)
        try:
            _queued(store, "t1")
            assert store.claim("t1", "w:1", 10, 3) == "claimed"
            assert store.revive("t1", "r1", fields) is False  # known: left as it is
            assert store.meta("t1")["owner"] == "w:1"
            assert store.revive("t2", "r2", {**fields, "workflow_run_id": "r2"}) is True
            assert store.meta("t2")["seq"] == "8" and store.task_for_run("r2") == "t2"
            assert store.claim("t2", "w:2", 10, 3) == "claimed"
            assert store.publish("t2", "w:2", "e", b"{}")
            assert client.xrange(events_key("t2")) == [(b"0-9", {b"e": b"{}"})]
            assert 0 < client.pttl(run_key("t2"))
        finally:
            client.close()
