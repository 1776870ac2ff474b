"""11. `firstgate serve` under many slow streams, and stop through HTTP.

A slow fake model (one token every 100 ms for 2 s, `bench.servers slow`)
answers a one-LLM workflow. Three fresh processes:

- in-process (the baseline): `--streams` concurrent `Workflow.run`s in one
  gevent process, the same shared route clients and SQLite store as serve;
- serve: `firstgate serve` in its own process with `--streams` concurrent
  streaming `POST /v1/workflows/run` from a gevent client process; the
  figures are the *server's* CPU seconds and peak RSS growth (from /proc);
- stop: `--stops` streams, 20 in flight at a time; 0 to 0.9 s after its first
  text chunk (spread so that stops do not all coincide) the client sends the
  stop request and times from just before sending it to the stream's last
  byte (stop-to-stream-end; target p99 10 ms).

    python -m bench.serve [--streams 1000] [--stops 200]
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

from bench.common import ServerProcess, line, ms, percentile, ratio  # noqa: E402

FRAMES, INTERVAL_S = 20, 0.1
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")
KEY = "bench-key-0123456789"


def flow() -> dict[str, Any]:
    """start(topic) -> llm -> end(text): a workflow whose answer streams."""
    llm = {
        "type": "llm",
        "title": "writer",
        "model": {"provider": "slow", "name": "m", "mode": "chat", "completion_params": {}},
        "prompt_template": [{"role": "user", "text": "{{#start.topic#}}"}],
    }
    end = {
        "type": "end",
        "title": "end",
        "outputs": [{"variable": "text", "value_selector": ["llm", "text"]}],
    }
    start = {
        "type": "start",
        "title": "start",
        "variables": [{"variable": "topic", "type": "text-input", "required": True}],
    }
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "stream", "mode": "workflow"},
        "workflow": {
            "graph": {
                "nodes": [
                    {"id": "start", "data": start},
                    {"id": "llm", "data": llm},
                    {"id": "end", "data": end},
                ],
                "edges": [
                    {"source": "start", "target": "llm"},
                    {"source": "llm", "target": "end"},
                ],
            }
        },
    }


def settings_yaml(model_url: str) -> str:
    return (
        f"providers:\n  slow: {{kind: openai-compatible, base_url: {model_url}}}\ndefault: slow\n"
    )


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * PAGE


class PeakRss:
    """Samples a process's RSS every 50 ms in a thread; `peak` is the highest seen."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, proc_rss(pid), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, proc_rss(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


# ---- the in-process baseline (runs in its own gevent process)


def run_inprocess(model_url: str, streams: int, workdir: Path) -> dict[str, Any]:
    import gevent
    from firstgate.runtime import RunOptions, RunResources, load_workflow
    from firstgate.runtime.settings import load_settings
    from firstgate.serve.server import MAX_ROUTE_CONNECTIONS, raise_open_file_limit
    from firstgate.store import open_store

    raise_open_file_limit()
    settings_path = workdir / "models.yaml"
    settings_path.write_text(settings_yaml(model_url))
    settings = load_settings(settings_path)
    workflow = load_workflow(flow())
    store = open_store(str(workdir / "inprocess.db"))
    resources = RunResources.open(
        settings, store=store, loader=load_workflow, max_connections=MAX_ROUTE_CONNECTIONS
    )
    counts: list[int] = []
    failures: list[str] = []

    def one(index: int) -> None:
        status, text = None, ""
        run = workflow.run({"topic": f"t{index}"}, RunOptions(user_id="bench"), resources)
        for event in run:
            wire = event.to_dict()  # as serve does for every event
            if wire["event"] == "workflow_finished":
                status = wire["data"]["status"]
                text = str((wire["data"].get("outputs") or {}).get("text", ""))
        if status != "succeeded":
            failures.append(str(status))
        else:
            counts.append(len(text))  # complete: every token arrived

    pid = os.getpid()
    sampler = PeakRss(pid)
    before_rss, before_cpu, start = proc_rss(pid), proc_cpu(pid), time.perf_counter()
    gevent.joinall([gevent.spawn(one, i) for i in range(streams)])
    wall, used = time.perf_counter() - start, proc_cpu(pid) - before_cpu
    peak = sampler.stop()
    resources.close()
    store.close()
    return {
        "streams": streams,
        "complete": sum(1 for n in counts if n == FRAMES),
        "failures": sorted(set(failures))[:3],
        "cpu_s": used,
        "wall_s": wall,
        "rss_per_stream_kib": (peak - before_rss) / streams / 1024,
    }


# ---- the HTTP client (runs in its own gevent process)


def _request(host: str, port: int, path: str, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + payload


def _post(host: str, port: int, path: str, body: dict[str, Any]) -> bytes:
    import socket

    with socket.create_connection((host, port), timeout=60) as sock:
        sock.sendall(_request(host, port, path, body))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def run_client(url: str, streams: int, concurrency: int, stop: bool) -> dict[str, Any]:
    import socket

    import gevent
    from firstgate.serve.server import raise_open_file_limit
    from gevent.pool import Pool

    raise_open_file_limit()
    host, port = re.match(r"http://([\d.]+):(\d+)", url).groups()  # type: ignore[union-attr]
    port_n = int(port)
    counts: list[int] = []
    failures: list[str] = []
    stop_to_end: list[float] = []

    def one(index: int) -> None:
        body = {"inputs": {"topic": f"t{index}"}, "user": "bench", "response_mode": "streaming"}
        data = b""
        stop_sent: list[float] = []
        stopper = None

        def send_stop(task: str, delay: float) -> None:
            gevent.sleep(delay)
            stop_sent.append(time.perf_counter())
            _post(host, port_n, f"/v1/workflows/tasks/{task}/stop", {"user": "bench"})

        try:
            with socket.create_connection((host, port_n), timeout=60) as sock:
                sock.sendall(_request(host, port_n, "/v1/workflows/run", body))
                while chunk := sock.recv(65536):
                    data += chunk
                    if stop and stopper is None and b'"event": "text_chunk"' in data:
                        task = re.search(rb'"task_id": "([0-9a-f-]+)"', data).group(1).decode()  # type: ignore[union-attr]
                        # Stops spread over the stream (0 to 0.9 s after its first token),
                        # so that those of the 20 streams in flight do not coincide.
                        stopper = gevent.spawn(send_stop, task, (index % 10) * 0.1)
                ended = time.perf_counter()
        except OSError as error:
            failures.append(type(error).__name__)
            return
        stop_sent = stop_sent[:1]
        if stop_sent:
            stop_to_end.append(ended - stop_sent[0])
        finished = re.search(rb'data: (\{"event": "workflow_finished".*?\})\n\n', data)
        if finished is None:
            failures.append("no workflow_finished")
            return
        result = json.loads(finished.group(1))["data"]
        want = "stopped" if stop else "succeeded"
        if result["status"] != want:
            failures.append(result["status"])
            return
        counts.append(len(str((result.get("outputs") or {}).get("text", ""))))

    start = time.perf_counter()
    Pool(concurrency).map(one, range(streams))
    return {
        "streams": streams,
        # Complete: ended as wanted, with every token (a stopped run has no outputs).
        "complete": sum(1 for n in counts if stop or n == FRAMES),
        "failures": sorted(set(failures))[:3],
        "wall_s": time.perf_counter() - start,
        "stop_to_end_s": stop_to_end,
    }


# ---- orchestration


def _child(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.serve", "--gevent", *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _start_serve(workdir: Path, model_url: str) -> tuple[subprocess.Popen[str], str]:
    apps = workdir / "apps"
    apps.mkdir(exist_ok=True)
    (apps / "stream.yml").write_text(yaml.safe_dump(flow()))
    (workdir / "models.yaml").write_text(settings_yaml(model_url))
    log = (workdir / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "firstgate.serve.cli", "serve", str(apps), "--port", "0",
         "--models", str(workdir / "models.yaml"), "--state", str(workdir / "serve.db")],
        env={**os.environ, "FIRSTGATE_APP_KEY_STREAM": KEY},
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up:
        found = re.search(r"http://[\d.]+:\d+", (workdir / "serve.log").read_text())
        if found:
            return process, found.group(0)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError((workdir / "serve.log").read_text())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--stops", type=int, default=200)
    parser.add_argument("--variant", choices=["inprocess", "client", "stop"])
    parser.add_argument("--url")
    parser.add_argument("--dir")
    parser.add_argument("--gevent", action="store_true")
    parser.add_argument("--in-flight", type=int, default=20, help="stop: streams at a time")
    args = parser.parse_args()
    if args.variant == "inprocess":
        print(json.dumps(run_inprocess(args.url, args.streams, Path(args.dir))))
        return
    if args.variant in ("client", "stop"):
        stop = args.variant == "stop"
        result = run_client(args.url, args.streams, args.in_flight if stop else args.streams, stop)
        print(json.dumps(result))
        return
    print(
        f"\n== 11. serve: {args.streams} concurrent streaming runs over HTTP vs in-process,"
        f" {FRAMES} tokens at {INTERVAL_S * 1000:.0f} ms; stop through HTTP [gevent] ==",
        flush=True,
    )
    with ServerProcess("slow", f"--interval={INTERVAL_S}", f"--frames={FRAMES}") as model, \
            tempfile.TemporaryDirectory(prefix="firstgate-bench-serve-") as tmp:  # fmt: skip
        workdir = Path(tmp)
        inproc = _child("--variant=inprocess", f"--url={model.base_url}", f"--dir={tmp}",
                        f"--streams={args.streams}")  # fmt: skip
        process, url = _start_serve(workdir, model.base_url)
        try:
            before_cpu, before_rss = proc_cpu(process.pid), proc_rss(process.pid)
            sampler = PeakRss(process.pid)
            served = _child("--variant=client", f"--url={url}", f"--streams={args.streams}")
            peak = sampler.stop()
            served["cpu_s"] = proc_cpu(process.pid) - before_cpu
            served["rss_per_stream_kib"] = (peak - before_rss) / args.streams / 1024
            time.sleep(3.0)  # the 1,000 runs' cleanup (workers, records) settles first
            stops = _child("--variant=stop", f"--url={url}", f"--streams={args.stops}")
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    for name, r in (
        ("in-process Workflow.run (baseline)", inproc),
        ("firstgate serve over HTTP", served),
    ):
        line(
            f"{name:36s} complete {r['complete']}/{r['streams']} {r['failures'] or ''}"
            f"  CPU {r['cpu_s']:.2f} s ({r['cpu_s'] / r['streams'] * 1000:.2f} ms/stream)"
            f"  wall {r['wall_s']:.2f} s  RSS {r['rss_per_stream_kib']:.1f} KiB/stream"
        )
    line(
        f"serve/in-process: CPU {ratio(served['cpu_s'], inproc['cpu_s'])},"
        f" RSS {ratio(served['rss_per_stream_kib'], inproc['rss_per_stream_kib'])}"
    )
    latencies = stops["stop_to_end_s"]
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    ok_stop = p99 <= 0.010 and stops["complete"] == stops["streams"]
    line(
        f"stop-to-stream-end over HTTP ({len(latencies)} streams, 20 at a time):"
        f" p50 {ms(p50)}  p99 {ms(p99)}  max {ms(max(latencies, default=0))}"
        f"  stopped {stops['complete']}/{stops['streams']} {stops['failures'] or ''}"
        f"  [{'ok' if ok_stop else 'MISSED (target p99 10 ms)'}]"
    )
    all_done = served["complete"] == served["streams"] and inproc["complete"] == inproc["streams"]
    line(f"all {args.streams} streams complete: {'yes' if all_done else 'NO'}")


if __name__ == "__main__":
    main()
