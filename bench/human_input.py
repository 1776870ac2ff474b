"""18. Resume latency of a human-input form: the form submitted -> the next
node's `node_started`, p50 / p99 (issue 23's targets: 50 ms in-process).

In-process: the run paused at the form (its checkpoint in a SQLite store),
`runtime/human_input.py`'s `answer` + `resume`, then the resumed run's events
until the next node starts. Baseline (same run): a fresh `workflow.run()` of
the same workflow until its first node starts.

Over HTTP (`firstgate serve`, one process, SQLite): `POST
/v1/form/human_input/{token}` sent -> the follower of `GET
/v1/workflow/{id}/events?continue_on_pause=true` reads the next node's
`node_started`. Baseline: `POST /v1/workflows/run` sent -> its first
`node_started` read.

Across processes (`firstgate serve --broker` and one `firstgate worker`,
Redis, PostgreSQL): the same form `POST` to the API process, the run queued
to the worker, resumed there from its checkpoint, its events through Redis to
the follower on the API process: the next node's `node_started` read (issue
23's target: p99 <= 100 ms). Baseline: a fresh broker-mode `POST
/v1/workflows/run` -> its first `node_started` read. The form's own reply time
(the store's close, the queueing) is printed beside it.

    python -m bench.human_input [--trials 200] [--http-trials 50] [--broker-trials 50]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from firstgate.runtime import RunOptions, RunResources, load_workflow
from firstgate.runtime import human_input as hi
from firstgate.runtime.execution import events as ev
from firstgate.store import open_store

from bench.common import header, line, ms, percentile, ratio

KEY = "bench-key-0123456789"


def document() -> dict[str, Any]:
    """start -> ask (a form: one paragraph, one action) -> after -> end."""

    def node(node_id: str, node_type: str, **data: Any) -> dict[str, Any]:
        return {"id": node_id, "data": {"type": node_type, "title": node_id, **data}}

    nodes = [
        node("start", "start", variables=[{"variable": "topic", "type": "text-input"}]),
        node(
            "ask", "human-input",
            form_content="About {{#start.topic#}}: {{#$output.note#}}",
            inputs=[{"type": "paragraph", "output_variable_name": "note"}],
            user_actions=[{"id": "ok", "title": "OK"}],
        ),
        node(
            "after", "template-transform", template="{{ n }}",
            variables=[{"variable": "n", "value_selector": ["ask", "note"]}],
        ),
        node("end", "end", outputs=[{"variable": "out", "value_selector": ["after", "output"]}]),
    ]  # fmt: skip
    edges = [
        {"source": "start", "target": "ask", "sourceHandle": "source"},
        {"source": "ask", "target": "after", "sourceHandle": "ok"},
        {"source": "after", "target": "end", "sourceHandle": "source"},
    ]
    return {
        "kind": "app",
        "app": {"mode": "workflow", "name": "resume bench"},
        "workflow": {"graph": {"nodes": nodes, "edges": edges}},
    }


class _NoModels:
    def client_for(self, provider: str) -> object:
        raise AssertionError(provider)


def in_process(trials: int) -> None:
    header(f"18. human-input resume latency, in-process, SQLite ({trials} trials)")
    workflow = load_workflow(document())
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(str(Path(folder) / "state.db"))
        try:
            with RunResources.open(store=store, clients=_NoModels()) as resources:
                resumes, fresh = [], []
                for _ in range(trials):
                    started = time.perf_counter()
                    run = workflow.run({"topic": "tea"}, RunOptions(), resources)
                    token = ""
                    for event in run:
                        if isinstance(event, ev.NodeStarted) and not fresh[len(resumes) :]:
                            fresh.append(time.perf_counter() - started)
                        if isinstance(event, ev.NodeAnnounced):
                            token = event.fields["form_token"]
                    start = time.perf_counter()
                    form = hi.open_form(store, token)
                    closed = hi.answer(store, form, "ok", {"note": "fine"})
                    resumed = hi.resume(workflow, closed, resources)
                    for event in resumed:
                        if isinstance(event, ev.NodeStarted) and event.node_id == "after":
                            resumes.append(time.perf_counter() - start)
                    assert resumed.status == "succeeded", resumed.status
        finally:
            store.close()
    p50, p99 = percentile(resumes, 50), percentile(resumes, 99)
    base50, base99 = percentile(fresh, 50), percentile(fresh, 99)
    line(f"fresh run -> first node_started (baseline): p50 {ms(base50)}, p99 {ms(base99)}")
    line(f"form submitted -> next node_started:        p50 {ms(p50)}, p99 {ms(p99)}")
    verdict = "ok" if p99 <= 0.050 else "over the 50 ms target"
    line(f"ratio p99: {ratio(p99, base99)} the fresh start  [{verdict}]")


def _apps(folder: Path) -> Path:
    apps = folder / "apps"
    apps.mkdir(exist_ok=True)
    (apps / "bench.yml").write_text(yaml.safe_dump(document()))
    return apps


def _start(folder: Path, name: str, args: list[str], ready: str) -> tuple[Any, str]:
    """A `firstgate` process, once its log shows `ready` (the match)."""
    env = {**os.environ, "FIRSTGATE_APP_KEY_BENCH": KEY}
    log = folder / f"{name}.log"
    command = [sys.executable, "-m", "firstgate.serve.cli", *args]
    with log.open("w") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
    give_up = time.monotonic() + 120
    while time.monotonic() < give_up:
        found = re.search(ready, log.read_text())
        if found:
            return process, found.group(0).rstrip("/")
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(log.read_text())


def _serve(folder: Path, *extra: str) -> tuple[Any, str]:
    apps = _apps(folder)
    args = ["serve", str(apps), "--port", "0", "--no-access-log", *extra]
    if "--database-url" not in extra:
        args += ["--state", str(folder / "state.db")]
    return _start(folder, "serve", args, r"http://[\d.]+:\d+/")


def _stop(process: Any) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _frames(response: httpx.Response):  # type: ignore[no-untyped-def]
    for text in response.iter_lines():
        if text.startswith("data: "):
            yield json.loads(text[6:])


def _follow(client: httpx.Client, run_id: str, ready: threading.Event, seen: list[float]) -> None:
    """Follow the run's events through its pause; note when `after` starts."""
    query = {"user": "bench", "continue_on_pause": "true"}
    with client.stream("GET", f"/v1/workflow/{run_id}/events", params=query) as response:
        ready.set()
        for frame in _frames(response):
            if frame["event"] == "node_started" and frame["data"]["node_id"] == "after":
                seen.append(time.perf_counter())


def _trials(url: str, trials: int) -> tuple[list[float], list[float], list[float]]:
    """(form POST -> next node_started read, its reply time, fresh POST run -> first
    node_started read) for `trials` runs, one at a time."""
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    resumes: list[float] = []
    replies: list[float] = []
    fresh: list[float] = []
    try:
        body = {"inputs": {"topic": "tea"}, "response_mode": "streaming", "user": "bench"}
        for _ in range(trials):
            sent = time.perf_counter()
            token = run_id = ""
            with client.stream("POST", "/v1/workflows/run", json=body) as response:
                for frame in _frames(response):
                    if frame["event"] == "node_started" and len(fresh) == len(resumes):
                        fresh.append(time.perf_counter() - sent)
                    if frame["event"] == "human_input_required":
                        token, run_id = frame["data"]["form_token"], frame["workflow_run_id"]
            seen: list[float] = []
            ready = threading.Event()
            reader = threading.Thread(target=_follow, args=(client, run_id, ready, seen))
            reader.start()
            ready.wait(10)
            time.sleep(0.01)  # the follower has read the history and waits
            start = time.perf_counter()
            reply = client.post(
                f"/v1/form/human_input/{token}",
                json={"inputs": {"note": "fine"}, "action": "ok", "user": "bench"},
            )
            replies.append(time.perf_counter() - start)
            assert reply.status_code == 200, reply.text
            reader.join(30)
            resumes.append(seen[0] - start)
    finally:
        client.close()
    return resumes, replies, fresh


def _report(
    resumes: list[float], replies: list[float], fresh: list[float], target: float | None
) -> None:
    p50, p99 = percentile(resumes, 50), percentile(resumes, 99)
    base50, base99 = percentile(fresh, 50), percentile(fresh, 99)
    line(f"POST run -> first node_started (baseline): p50 {ms(base50)}, p99 {ms(base99)}")
    line(f"POST form -> next node_started read:      p50 {ms(p50)}, p99 {ms(p99)}")
    line(f"POST form -> its reply:                   p50 {ms(percentile(replies, 50))}, "
         f"p99 {ms(percentile(replies, 99))}")  # fmt: skip
    verdict = ""
    if target is not None:
        verdict = "  [ok]" if p99 <= target else f"  [over the {target * 1000:.0f} ms target]"
    line(f"ratio p99: {ratio(p99, base99)} the fresh start{verdict}")
    line(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def over_http(trials: int) -> None:
    header(f"18. human-input resume latency over HTTP, firstgate serve, SQLite ({trials} trials)")
    with tempfile.TemporaryDirectory() as name:
        process, url = _serve(Path(name))
        try:
            figures = _trials(url, trials)
        finally:
            _stop(process)
    _report(*figures, target=None)


@contextmanager
def _broker_services(folder: Path) -> Iterator[tuple[str, str]]:
    """(Redis URL, PostgreSQL URL), started for this run (the tests' own helpers)."""
    from tests import pg_cluster
    from tests.postgres_support import ENV_URL, fresh_database
    from tests.redis_support import RedisServer

    with ExitStack() as stack:
        redis = RedisServer(folder / "redis")
        redis.start()
        stack.callback(redis.stop)
        server = os.environ.get(ENV_URL)
        if not server:
            pg_dir = tempfile.mkdtemp(prefix="firstgate-pg-")
            server = pg_cluster.start_cluster(pg_dir)
            stack.callback(pg_cluster.stop_cluster, pg_dir)
        yield redis.url, stack.enter_context(fresh_database(server))


def over_broker(trials: int) -> None:
    header(
        f"18. human-input resume latency across processes, serve --broker -> Redis -> worker,"
        f" PostgreSQL ({trials} trials)"
    )
    with tempfile.TemporaryDirectory() as name, ExitStack() as stack:
        folder = Path(name)
        broker, database = stack.enter_context(_broker_services(folder))
        shared = ["--database-url", database, "--broker", broker]
        worker, _ = _start(
            folder, "worker", ["worker", str(_apps(folder)), *shared], r"worker \S+ ready"
        )
        stack.callback(_stop, worker)
        api, url = _serve(folder, *shared)
        stack.callback(_stop, api)
        figures = _trials(url, trials)
    _report(*figures, target=0.100)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--http-trials", type=int, default=50)
    parser.add_argument("--broker-trials", type=int, default=50)
    args = parser.parse_args()
    in_process(args.trials)
    over_http(args.http_trials)
    over_broker(args.broker_trials)


if __name__ == "__main__":
    main()
