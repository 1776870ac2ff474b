"""`firstgate serve --broker` with `firstgate worker` processes: real Redis (Debian's
redis-server on a free port), real worker processes, two API processes, the
real PostgreSQL. A run executes on a worker; its events reach whichever API
process a client asks; a stop sent to any API process ends it; and the faults
of issue 17: a worker killed mid-run, Redis restarted mid-run, a run past its
time limit, poison messages."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.postgres_support import (  # noqa: F401 - fixtures
    fresh_database,
    postgres_server,
    postgres_url,
)
from tests.redis_support import RedisServer, free_port, redis_server, worker
from tests.serve_support import APPS, KEYS, ROOT, Server, echo_model, models_file, serve

pytestmark = [
    pytest.mark.slow,
    # Every process under test (serve, worker) runs gevent whatever the test
    # client does: the gevent pass of the suite would run the same thing again.
    pytest.mark.skipif(
        os.environ.get("FIRSTGATE_GEVENT") == "1", reason="the processes run gevent in both passes"
    ),
]


def frames(response: httpx.Response) -> Iterator[tuple[int | None, dict | str]]:
    """SSE frames as (id, event dict) or (None, "ping")."""
    buffer = ""
    for text in response.iter_text():
        buffer += text
        while "\n\n" in buffer:
            frame, buffer = buffer.split("\n\n", 1)
            event_id = None
            for line in frame.split("\n"):
                if line.startswith("id: "):
                    event_id = int(line[4:])
                elif line.startswith("data: "):
                    yield event_id, json.loads(line[6:])
                elif line == "event: ping":
                    yield None, "ping"
    assert buffer == ""


def events_of(response: httpx.Response) -> list[dict]:
    return [e for _, e in frames(response) if e != "ping"]


def streaming(topic: str, user: str = "u") -> dict:
    return {"inputs": {"topic": topic}, "user": user, "response_mode": "streaming"}


def blocking(topic: str, user: str = "u") -> dict:
    return {"inputs": {"topic": topic}, "user": user, "response_mode": "blocking"}


@pytest.fixture(scope="module")
def model() -> Iterator[str]:
    with echo_model() as base_url:
        yield base_url


@pytest.fixture(scope="module")
def database(postgres_server: str) -> Iterator[str]:  # noqa: F811 - the fixture
    # One database for the module's cluster (postgres_url is per test).
    with fresh_database(postgres_server) as url:
        yield url


class Cluster:
    def __init__(
        self, broker: RedisServer, api_a: Server, api_b: Server, model: str, database: str
    ) -> None:
        self.broker = broker
        self.a = api_a
        self.b = api_b
        self.model = model
        self.database = database

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.broker.url)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, model: str, database: str
) -> Iterator[Cluster]:
    """Redis, two workers, two API processes, one PostgreSQL database."""
    tmp = tmp_path_factory.mktemp("cluster")
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    env = {"FIRSTGATE_SSE_PING_S": "0.3"}
    with redis_server(tmp / "redis") as broker:
        # Re-runs allowed: a second delivery of a held run must still not run it.
        attempts = ("--max-attempts", "2")
        api = ("--broker", broker.url, *attempts)
        with (
            worker(tmp, model, broker.url, database, name="w1", extra=attempts),
            worker(tmp, model, broker.url, database, name="w2", extra=attempts),
            serve(tmp / "a", model, database=database, extra=api, env=env) as api_a,
            serve(tmp / "b", model, database=database, extra=api, env=env) as api_b,
        ):
            yield Cluster(broker, api_a, api_b, model, database)


# ---- runs on workers, read and stopped through any API process


def test_a_blocking_run_executes_on_a_worker(cluster: Cluster) -> None:
    with cluster.a.key_client("story") as a, cluster.b.key_client("story") as b:
        reply = a.post("/v1/workflows/run", json=blocking("hello"))
        assert reply.status_code == 200, reply.text
        data = reply.json()["data"]
        assert data["status"] == "succeeded" and data["outputs"]["text"] == "echo: hello"
        # The shared store: the other API process knows the run.
        record = b.get(f"/v1/workflows/run/{data['id']}").json()
        assert record["status"] == "succeeded" and record["outputs"]["text"] == "echo: hello"


def test_a_streamed_run_has_difys_events_in_order(cluster: Cluster) -> None:
    with (
        cluster.a.key_client("story") as a,
        a.stream("POST", "/v1/workflows/run", json=streaming("one two three")) as reply,
    ):
        assert reply.headers["content-type"].startswith("text/event-stream")
        events = events_of(reply)
    names = [e["event"] for e in events]
    assert names[0] == "workflow_started" and names[-1] == "workflow_finished"
    assert names.count("workflow_started") == 1
    streamed = "".join(e["data"]["text"] for e in events if e["event"] == "text_chunk")
    assert events[-1]["data"]["outputs"]["text"] == "echo: one two three"
    assert streamed.startswith("echo: one two three")
    assert len({e["task_id"] for e in events}) == 1
    assert len({e["workflow_run_id"] for e in events}) == 1


def test_bad_input_is_a_400_and_nothing_is_queued(cluster: Cluster) -> None:
    client = cluster.redis()
    queued = client.llen("firstgate")
    with cluster.a.key_client("story") as a:
        reply = a.post("/v1/workflows/run", json={"inputs": {}, "user": "u"})
    assert reply.status_code == 400 and reply.json()["code"] == "invalid_param"
    assert "topic" in reply.json()["message"]
    assert client.llen("firstgate") == queued


def test_a_chat_over_three_turns_alternating_api_processes(cluster: Cluster) -> None:
    conversation = None
    answers = []
    for server in (cluster.a, cluster.b, cluster.a):
        with server.key_client("chat") as http:
            body = {"inputs": {}, "query": "[count] again", "user": "u",
                    "response_mode": "blocking", "conversation_id": conversation}  # fmt: skip
            reply = http.post("/v1/chat-messages", json=body)
            assert reply.status_code == 200, reply.text
            conversation = reply.json()["conversation_id"]
            answers.append(reply.json()["answer"])
    assert answers == ["turn 1", "turn 2", "turn 3"]
    with cluster.b.key_client("chat") as b:
        messages = b.get("/v1/messages", params={"conversation_id": conversation, "user": "u"})
    assert [m["answer"] for m in messages.json()["data"]] == answers


def test_a_stop_sent_to_the_other_api_process_ends_the_stream(cluster: Cluster) -> None:
    with (
        cluster.a.key_client("story") as a,
        cluster.b.key_client("story") as b,
        a.stream("POST", "/v1/workflows/run", json=streaming("[slow] story")) as reply,
    ):
        events = []
        sent = False
        for _, event in frames(reply):
            if event == "ping":
                continue
            events.append(event)
            if event["event"] == "text_chunk" and not sent:
                stopped = b.post(f"/v1/workflows/tasks/{event['task_id']}/stop", json={"user": "u"})
                assert stopped.json() == {"result": "success"}
                sent = True
        run_id = events[0]["workflow_run_id"]
        record = b.get(f"/v1/workflows/run/{run_id}").json()
    last_two = [(e["event"], e["data"]["status"]) for e in events[-2:]]
    assert last_two == [("node_finished", "stopped"), ("workflow_finished", "stopped")]
    # Far fewer than the 200 words the model would have sent.
    assert sum(e["event"] == "text_chunk" for e in events) < 100
    assert record["status"] == "stopped"


def test_a_client_resumes_on_another_api_process_without_loss(cluster: Cluster) -> None:
    seen: list[dict] = []
    ids: list[int | None] = []
    with (
        cluster.a.key_client("story") as a,
        a.stream("POST", "/v1/workflows/run", json=streaming("[medium] resume")) as reply,
    ):
        for event_id, event in frames(reply):
            if event != "ping":
                seen.append(event)
                ids.append(event_id)
            if len(seen) == 5:
                break  # the client goes away after five events
    assert ids == [1, 2, 3, 4, 5]  # the first stream numbers its frames too
    run_id = seen[0]["workflow_run_id"]
    with (
        cluster.b.key_client("story") as b,
        b.stream(
            "GET",
            f"/v1/workflow/{run_id}/events",
            params={"user": "u"},
            headers={"Last-Event-ID": str(ids[-1])},
        ) as resumed,
    ):
        rest = [(i, e) for i, e in frames(resumed) if e != "ping"]
    assert [i for i, _ in rest] == list(range(6, 6 + len(rest)))
    whole = seen + [e for _, e in rest]
    assert [e["event"] for e in whole].count("workflow_started") == 1
    assert whole[-1]["event"] == "workflow_finished"
    text = "".join(e["data"]["text"] for e in whole if e["event"] == "text_chunk")
    assert text.rstrip("\n") == whole[-1]["data"]["outputs"]["text"]
    # Someone else's user does not get the run's events.
    with cluster.b.key_client("story") as b:
        other = b.get(f"/v1/workflow/{run_id}/events", params={"user": "mallory"})
    assert other.status_code == 404


def test_a_second_delivery_of_a_held_run_does_nothing(cluster: Cluster) -> None:
    """Never twice at once: the same message again while a worker holds the run."""
    from celery import Celery

    with (
        cluster.a.key_client("story") as a,
        a.stream("POST", "/v1/workflows/run", json=streaming("[medium] once")) as reply,
    ):
        first = None
        events = []
        for _, event in frames(reply):
            if event == "ping":
                continue
            events.append(event)
            if first is None:
                first = event
                meta = cluster.redis().hgetall(f"firstgate:run:{event['task_id']}")
                sender = Celery(broker=cluster.broker.url, set_as_current=False)
                request = json.loads(meta[b"request"])
                sender.send_task("firstgate.run", kwargs={"request": request}, queue="firstgate")
    assert [e["event"] for e in events].count("workflow_started") == 1
    assert events[-1]["event"] == "workflow_finished"
    assert events[-1]["data"]["status"] == "succeeded"
    # The duplicate was taken and dropped: the queue is empty again.
    give_up = time.monotonic() + 20
    while cluster.redis().llen("firstgate") and time.monotonic() < give_up:
        time.sleep(0.1)
    assert cluster.redis().llen("firstgate") == 0


def test_more_runs_at_once_than_a_default_redis_pool_holds(cluster: Cluster) -> None:
    """Every waiting reply holds a Redis connection (XREAD BLOCK): 150 at once on one
    API process all complete (redis-py's default pool, 100, refused the rest)."""
    from concurrent.futures import ThreadPoolExecutor

    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    headers = {"Authorization": f"Bearer {KEYS['story']}"}
    with httpx.Client(base_url=cluster.a.url, headers=headers, timeout=60, limits=limits) as a:

        def one(index: int) -> str:
            reply = a.post("/v1/workflows/run", json=blocking(f"[medium] many {index}"))
            return reply.json()["data"]["status"] if reply.status_code == 200 else reply.text

        with ThreadPoolExecutor(150) as pool:
            statuses = list(pool.map(one, range(150)))
    assert statuses == ["succeeded"] * 150


def test_gunicorn_serves_with_several_http_workers(cluster: Cluster, tmp_path: Path) -> None:
    """The production entry point with `FIRSTGATE_BROKER`: two gunicorn workers, runs
    executed by the Celery workers, a run read back through either."""
    port = free_port()
    env = {
        **os.environ,
        "FIRSTGATE_APPS_DIR": str(APPS),
        "FIRSTGATE_MODELS": str(models_file(tmp_path, cluster.model)),
        "FIRSTGATE_DATABASE_URL": cluster.database,
        "FIRSTGATE_BROKER": cluster.broker.url,
        "FIRSTGATE_HTTP_WORKERS": "2",
        "FIRSTGATE_BIND": f"127.0.0.1:{port}",
        "FIRSTGATE_GRACE": "2",
        **{f"FIRSTGATE_APP_KEY_{stem.upper()}": key for stem, key in KEYS.items()},
    }
    gunicorn = Path(sys.executable).with_name("gunicorn")
    command = [
        str(gunicorn),
        "-c",
        "python:firstgate.serve.gunicorn_conf",
        "firstgate.serve.wsgi:application()",
    ]
    log = tmp_path / "gunicorn.log"
    with log.open("w") as sink:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink, stderr=sink)
    try:
        url = f"http://127.0.0.1:{port}"
        give_up = time.monotonic() + 60
        while log.read_text().count("Booting worker") < 2 or not _answers(url):
            assert process.poll() is None and time.monotonic() < give_up, log.read_text()
            time.sleep(0.1)
        headers = {"Authorization": f"Bearer {KEYS['story']}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            replies = [http.post("/v1/workflows/run", json=blocking(f"g{i}")) for i in range(4)]
            with http.stream("POST", "/v1/workflows/run", json=streaming("streamed")) as reply:
                events = events_of(reply)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()
    outputs = [r.json()["data"]["outputs"]["text"] for r in replies]
    assert outputs == [f"echo: g{i}" for i in range(4)]
    assert events[-1]["data"]["outputs"]["text"] == "echo: streamed"


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/v1/meta", timeout=1).status_code < 500
    except httpx.TransportError:
        return False


# ---- settings


def test_sqlite_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    for command in (
        ["serve", str(APPS), "--broker", "redis://127.0.0.1:1/0", "--state", str(tmp_path / "s")],
        ["worker", str(APPS), "--broker", "redis://127.0.0.1:1/0"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "firstgate.serve.cli", *command],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "FIRSTGATE_APP_KEY_STORY": "k" * 20},
        )
        assert done.returncode == 2, done.stderr
        assert "PostgreSQL" in done.stderr and "SQLite" in done.stderr
        assert "Traceback" not in done.stderr


def test_an_unreachable_redis_is_a_clear_message(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    broker = f"redis://user:hunter2secret@127.0.0.1:{free_port()}/0"
    for command in (["serve", str(APPS), "--port", "0"], ["worker", str(APPS)]):
        done = subprocess.run(
            [sys.executable, "-m", "firstgate.serve.cli", *command, "--broker", broker,
             "--database-url", postgres_url],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "FIRSTGATE_APP_KEY_STORY": "k" * 20},
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "cannot reach Redis at redis://user:***@127.0.0.1" in done.stderr
        assert "hunter2secret" not in done.stderr + done.stdout
        assert "Traceback" not in done.stderr


# ---- faults


def _parse(page: str) -> dict[str, float]:
    """A Prometheus text page as series -> value (comments left out)."""
    found: dict[str, float] = {}
    for line in page.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            found[series] = float(value)
    return found


def _metrics(port: int) -> dict[str, float]:
    """A worker's `/metrics` (`--metrics-port`), parsed."""
    return _parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)


def _holder(client: redis.Redis, task_id: str) -> str:
    give_up = time.monotonic() + 10
    while time.monotonic() < give_up:
        owner = client.hget(f"firstgate:run:{task_id}", "owner")
        if owner:
            return owner.decode().split(":")[0]
        time.sleep(0.02)
    raise AssertionError("no worker took the run")


@pytest.mark.parametrize("attempts", [1, 2])
def test_a_worker_killed_mid_run(
    tmp_path: Path,
    model: str,
    postgres_url: str,  # noqa: F811 - the fixture
    attempts: int,
) -> None:
    """SIGKILL the worker holding a run: with one attempt the run ends `failed` with
    a clear error once its lease lapses; with two, the other worker runs it again,
    never both at once; either way it is never lost."""
    settings = ("--lease", "1", "--visibility-timeout", "4", "--max-attempts", str(attempts))
    ports = {"w1": free_port(), "w2": free_port()}
    with redis_server(tmp_path / "redis") as broker:
        client = redis.Redis.from_url(broker.url)
        with (
            worker(
                tmp_path,
                model,
                broker.url,
                postgres_url,
                name="w1",
                extra=(*settings, "--metrics-port", str(ports["w1"])),
            ) as w1,
            worker(
                tmp_path,
                model,
                broker.url,
                postgres_url,
                name="w2",
                extra=(*settings, "--metrics-port", str(ports["w2"])),
            ) as w2,
            serve(
                tmp_path,
                model,
                database=postgres_url,
                extra=("--broker", broker.url, *settings),
                env={"FIRSTGATE_SSE_PING_S": "0.5"},
            ) as api,
            api.key_client("story") as http,
            http.stream("POST", "/v1/workflows/run", json=streaming("[medium] doomed")) as reply,
        ):
            events = []
            killed_at = None
            for _, event in frames(reply):
                if killed_at is not None:
                    # Ended within a few leases, not left hanging (pings keep coming).
                    assert time.monotonic() - killed_at < 30, "the run did not end"
                if event == "ping":
                    continue
                events.append(event)
                if event["event"] == "text_chunk" and killed_at is None:
                    holder = _holder(client, event["task_id"])
                    victim = w1 if holder in w1.output() else w2
                    survivor = "w2" if victim is w1 else "w1"
                    victim.kill()
                    killed_at = time.monotonic()
            ended_after = time.monotonic() - (killed_at or 0)
            record = http.get(f"/v1/workflows/run/{events[0]['workflow_run_id']}").json()
            # Past the visibility timeout the broker hands the message out again:
            # the run is not executed again (it is finished), the queue drains.
            time.sleep(4.5)
            give_up = time.monotonic() + 30
            while time.monotonic() < give_up and (
                client.llen("firstgate") or client.hlen("unacked")
            ):
                time.sleep(0.2)
            again = http.get(f"/v1/workflows/run/{events[0]['workflow_run_id']}").json()
            # The survivor's sweeper reaped the lapsed lease, and says so on /metrics.
            scraped = _metrics(ports[survivor])
        stream_length = client.xlen(f"firstgate:events:{events[0]['task_id']}")
    names = [e["event"] for e in events]
    finished = events[-1]
    assert finished["event"] == "workflow_finished"
    assert names.count("workflow_finished") == 1
    if attempts == 1:
        assert finished["data"]["status"] == "failed"
        assert "stopped answering" in finished["data"]["error"]
        assert record["status"] == "failed" and "stopped answering" in record["error"]
        assert names.count("workflow_started") == 1
    else:
        assert finished["data"]["status"] == "succeeded"
        assert record["status"] == "succeeded"
        # Two attempts, one after the other: nothing of the first after the second began.
        assert names.count("workflow_started") == 2
        second = names.index("workflow_started", 1)

        def executions(part: list[dict]) -> set[str]:
            return {e["data"]["id"] for e in part if e["event"].startswith("node_")}

        assert executions(events[:second]) and executions(events[second:])
        assert not executions(events[:second]) & executions(events[second:])
    assert again["status"] == record["status"]
    outcome = "fail" if attempts == 1 else "requeue"
    assert scraped.get(f'firstgate_lease_reaps_total{{outcome="{outcome}"}}') == 1, scraped
    # Every event the client saw is in the stream, and nothing was added later (+1: the end).
    assert stream_length == len(events) + 1
    print(f"killed worker: run ended {ended_after:.2f} s after the kill (lease 1 s)")


def test_a_hung_worker_loses_its_run_and_adds_nothing_when_it_wakes(
    tmp_path: Path,
    model: str,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    """SIGSTOP the worker holding a run (a process that hangs: its heartbeat stops
    with it): another worker ends the run `failed` once the lease lapses. Woken up
    (SIGCONT), the hung worker finds its hold gone and publishes nothing more."""
    settings = ("--lease", "1", "--visibility-timeout", "4")
    with redis_server(tmp_path / "redis") as broker:
        client = redis.Redis.from_url(broker.url)
        with (
            worker(tmp_path, model, broker.url, postgres_url, name="w1", extra=settings) as w1,
            worker(tmp_path, model, broker.url, postgres_url, name="w2", extra=settings) as w2,
            serve(
                tmp_path, model, database=postgres_url, extra=("--broker", broker.url, *settings)
            ) as api,
            api.key_client("story") as http,
        ):
            events = []
            with http.stream("POST", "/v1/workflows/run", json=streaming("[slow] hang")) as reply:
                hung = None
                for _, event in frames(reply):
                    if event == "ping":
                        continue
                    events.append(event)
                    if event["event"] == "text_chunk" and hung is None:
                        holder = _holder(client, event["task_id"])
                        hung = w1 if holder in w1.output() else w2
                        hung.process.send_signal(signal.SIGSTOP)
            task_id = events[0]["task_id"]
            length_at_end = client.xlen(f"firstgate:events:{task_id}")
            hung.process.send_signal(signal.SIGCONT)
            # Awake: its next publish or heartbeat is refused; give it time to try.
            time.sleep(3.0)
            length_later = client.xlen(f"firstgate:events:{task_id}")
            record = http.get(f"/v1/workflows/run/{events[0]['workflow_run_id']}").json()
            # The woken worker goes on working.
            after = [http.post("/v1/workflows/run", json=blocking(f"after {i}")) for i in range(4)]
            assert hung.process.poll() is None
    finished = events[-1]
    assert finished["event"] == "workflow_finished"
    assert finished["data"]["status"] == "failed"
    assert "stopped answering" in finished["data"]["error"]
    assert record["status"] == "failed"
    assert length_later == length_at_end == len(events) + 1
    assert [a.json()["data"]["status"] for a in after] == ["succeeded"] * 4


def test_redis_restarted_mid_run_loses_no_event(
    tmp_path: Path,
    model: str,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    with redis_server(tmp_path / "redis") as broker:
        with (
            worker(tmp_path, model, broker.url, postgres_url) as w,
            serve(
                tmp_path,
                model,
                database=postgres_url,
                extra=("--broker", broker.url),
                env={"FIRSTGATE_SSE_PING_S": "0.5"},
            ) as api,
            api.key_client("story") as http,
        ):
            seen: list[tuple[int | None, dict]] = []
            give_up = time.monotonic() + 60  # the model's 200 words take 20 s
            with http.stream(
                "POST", "/v1/workflows/run", json=streaming("[slow] survive")
            ) as reply:
                restarted = stopped = False
                for _, event in frames(reply):
                    assert time.monotonic() < give_up, "the stream did not end"
                    if event == "ping":
                        continue
                    seen.append((None, event))
                    chunks = sum(e["event"] == "text_chunk" for _, e in seen)
                    if chunks == 3 and not restarted:
                        broker.kill()
                        time.sleep(0.5)
                        broker.start()
                        restarted = True
                    if chunks == 25 and not stopped:
                        # The stop channel came back too.
                        task = event["task_id"]
                        http.post(f"/v1/workflows/tasks/{task}/stop", json={"user": "u"})
                        stopped = True
            events = [e for _, e in seen]
            run_id = events[0]["workflow_run_id"]
            # Read again from the start: the same events, in the same order.
            with http.stream("GET", f"/v1/workflow/{run_id}/events", params={"user": "u"}) as again:
                replay = [(i, e) for i, e in frames(again) if e != "ping"]
            after = http.post("/v1/workflows/run", json=blocking("after the restart"))
            assert "ready" in w.output()
    assert restarted and stopped
    assert [e for _, e in replay] == events
    assert [i for i, _ in replay] == list(range(1, len(events) + 1))
    assert events[-1]["event"] == "workflow_finished"
    assert events[-1]["data"]["status"] == "stopped"
    assert after.status_code == 200 and after.json()["data"]["outputs"]["text"] == (
        "echo: after the restart"
    )


def test_a_run_past_its_time_limit_ends_failed(
    tmp_path: Path,
    model: str,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    limit = ("--time-limit", "1.5")
    with (
        redis_server(tmp_path / "redis") as broker,
        worker(tmp_path, model, broker.url, postgres_url, extra=limit),
        serve(
            tmp_path, model, database=postgres_url, extra=("--broker", broker.url, *limit)
        ) as api,
        api.key_client("story") as http,
        http.stream("POST", "/v1/workflows/run", json=streaming("[slow] forever")) as reply,
    ):
        events = events_of(reply)
    finished = events[-1]
    assert finished["event"] == "workflow_finished"
    assert finished["data"]["status"] == "failed"
    assert "1.5" in finished["data"]["error"]
    # The model would have gone on for 20 s.
    assert sum(e["event"] == "text_chunk" for e in events) < 100


def test_poison_messages_go_to_the_dead_letters(
    tmp_path: Path,
    model: str,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    from celery import Celery
    from kombu import Connection

    port = free_port()
    with (
        redis_server(tmp_path / "redis") as broker,
        worker(
            tmp_path,
            model,
            broker.url,
            postgres_url,
            extra=("--visibility-timeout", "2", "--lease", "1", "--metrics-port", str(port)),
        ) as w,  # noqa: E501
        serve(tmp_path, model, database=postgres_url, extra=("--broker", broker.url)) as api,
    ):
        client = redis.Redis.from_url(broker.url)
        sender = Celery(broker=broker.url, set_as_current=False)
        sender.send_task("firstgate.run", args=["not a run"], queue="firstgate")
        sender.send_task("firstgate.run", kwargs={"request": {"app_stem": 5}}, queue="firstgate")
        sender.send_task("firstgate.nothing", kwargs={}, queue="firstgate")
        with Connection(broker.url) as connection:
            producer = connection.Producer()
            producer.publish(
                b"\xff\xfe not json",
                routing_key="firstgate",
                content_type="application/json",
                content_encoding="binary",
                headers={"task": "firstgate.run", "id": "poison-4"},
            )
        give_up = time.monotonic() + 30
        while client.xlen("firstgate:dead-letters") < 4 and time.monotonic() < give_up:
            time.sleep(0.1)
        # The worker goes on: a good run after the poison.
        with api.key_client("story") as http:
            good = http.post("/v1/workflows/run", json=blocking("still here"))
        # Past the visibility timeout nothing comes back: no crash loop.
        time.sleep(3.0)
        letters = client.xrange("firstgate:dead-letters")
        assert w.process.poll() is None
        scraped = _metrics(port)
        with httpx.Client(base_url=api.url, timeout=10) as plain:
            api_scraped = _parse(plain.get("/metrics").text)
    assert scraped["firstgate_dead_letters_total"] == 4, scraped
    assert scraped["firstgate_broker_queue_depth"] == 0
    assert api_scraped["firstgate_broker_queue_depth"] == 0
    reasons = sorted(fields[b"reason"].decode() for _, fields in letters)
    assert reasons == ["malformed", "malformed", "undecodable", "unknown-task"], reasons
    assert good.status_code == 200 and good.json()["data"]["status"] == "succeeded"
