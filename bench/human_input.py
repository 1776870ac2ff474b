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

    python -m bench.human_input [--trials 200] [--http-trials 50]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
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


def _serve(folder: Path) -> tuple[Any, str]:
    import os
    import re
    import subprocess
    import sys

    apps = folder / "apps"
    apps.mkdir()
    (apps / "bench.yml").write_text(yaml.safe_dump(document()))
    env = {**os.environ, "FIRSTGATE_APP_KEY_BENCH": KEY}
    log = folder / "serve.log"
    command = [
        sys.executable, "-m", "firstgate.serve.cli", "serve", str(apps), "--port", "0",
        "--state", str(folder / "state.db"), "--no-access-log",
    ]  # fmt: skip
    with log.open("w") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up:
        found = re.search(r"http://[\d.]+:\d+/", log.read_text())
        if found:
            return process, found.group(0).rstrip("/")
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(log.read_text())


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


def over_http(trials: int) -> None:
    header(f"18. human-input resume latency over HTTP, firstgate serve, SQLite ({trials} trials)")
    with tempfile.TemporaryDirectory() as name:
        process, url = _serve(Path(name))
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
        try:
            resumes, fresh = [], []
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
                assert reply.status_code == 200, reply.text
                reader.join(30)
                resumes.append(seen[0] - start)
        finally:
            client.close()
            process.terminate()
            process.wait(30)
    p50, p99 = percentile(resumes, 50), percentile(resumes, 99)
    base50, base99 = percentile(fresh, 50), percentile(fresh, 99)
    line(f"POST run -> first node_started (baseline): p50 {ms(base50)}, p99 {ms(base99)}")
    line(f"POST form -> next node_started read:      p50 {ms(p50)}, p99 {ms(p99)}")
    line(f"ratio p99: {ratio(p99, base99)} the fresh start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--http-trials", type=int, default=50)
    args = parser.parse_args()
    in_process(args.trials)
    over_http(args.http_trials)


if __name__ == "__main__":
    main()
