"""13. `serve --broker`: runs on Celery workers through Redis, against in-process `serve`.

Real parts: Debian's `redis-server` (append-only file fsynced on every write,
as the README recommends), PostgreSQL (`tests/pg_cluster.py`, or
`FIRSTGATE_TEST_DATABASE_URL`), `firstgate worker` and `firstgate serve`
processes, a gevent client process speaking raw HTTP. Baseline: in-process
`firstgate serve` (same apps, same store), measured in the same run.

- queue latency: one streaming run at a time of a trivial workflow (start ->
  end), from sending the request to reading its `workflow_started` frame;
- runs per second: `--runs` blocking runs of that workflow, `--concurrency`
  at a time, with 1 worker and with 2 workers (the scaling ratio);
- stop-to-stream-end across processes: `--stops` slow streams, 20 at a time,
  stopped 0 to 0.9 s after their first token (client -> API -> Redis ->
  worker -> gate -> Redis -> API -> client); target p99 50 ms;
- `--streams` concurrent slow streaming runs (20 tokens at 100 ms) across 2
  workers: all complete; CPU and RSS growth per stream of every process that
  serves them (API + workers), against in-process serve.

    python -m bench.distributed [--runs 1000] [--streams 1000] [--stops 200]
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import ExitStack, contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

from bench.common import ServerProcess, line, ms, percentile, ratio  # noqa: E402
from bench.serve import KEY, PeakRss, flow, proc_cpu, proc_rss, settings_yaml  # noqa: E402

ECHO_KEY = "bench-echo-0123456789"
FRAMES, INTERVAL_S = 20, 0.1


def echo_flow() -> dict[str, Any]:
    """start(topic) -> end(text = topic): the trivial workflow (no model)."""
    start = {
        "type": "start",
        "title": "start",
        "variables": [{"variable": "topic", "type": "text-input", "required": True}],
    }
    end = {
        "type": "end",
        "title": "end",
        "outputs": [{"variable": "text", "value_selector": ["start", "topic"]}],
    }
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "echo", "mode": "workflow"},
        "workflow": {
            "graph": {
                "nodes": [{"id": "start", "data": start}, {"id": "end", "data": end}],
                "edges": [{"source": "start", "target": "end"}],
            }
        },
    }


# ---- the client side (its own gevent process)


def _request(host: str, port: int, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body).encode()
    return (
        f"POST /v1/workflows/run HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {ECHO_KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode() + payload


def _address(url: str) -> tuple[str, int]:
    host, port = re.match(r"http://([\d.]+):(\d+)", url).groups()  # type: ignore[union-attr]
    return host, int(port)


def run_latency(url: str, runs: int) -> dict[str, Any]:
    """Send to `workflow_started`, one run at a time."""
    import socket

    host, port = _address(url)
    latencies: list[float] = []
    failures: list[str] = []
    for index in range(runs):
        body = {"inputs": {"topic": f"l{index}"}, "user": "bench", "response_mode": "streaming"}
        data = b""
        with socket.create_connection((host, port), timeout=60) as sock:
            sent = time.perf_counter()
            sock.sendall(_request(host, port, body))
            started = None
            while chunk := sock.recv(65536):
                data += chunk
                if started is None and b'"event": "workflow_started"' in data:
                    started = time.perf_counter()
        if started is None or b'"status": "succeeded"' not in data:
            failures.append(data[-200:].decode(errors="replace"))
            continue
        latencies.append(started - sent)
    return {"latencies": latencies, "failures": failures[:3]}


def run_throughput(url: str, runs: int, concurrency: int) -> dict[str, Any]:
    """`runs` blocking runs, `concurrency` at a time; how many succeeded, how long."""
    import socket

    from gevent.pool import Pool

    host, port = _address(url)
    ok: list[int] = []
    failures: list[str] = []

    def one(index: int) -> None:
        body = {"inputs": {"topic": f"r{index}"}, "user": "bench", "response_mode": "blocking"}
        data = b""
        try:
            with socket.create_connection((host, port), timeout=120) as sock:
                sock.sendall(_request(host, port, body))
                while chunk := sock.recv(65536):
                    data += chunk
        except OSError as error:
            failures.append(type(error).__name__)
            return
        if f'"text": "r{index}"'.encode() in data and b'"succeeded"' in data:
            ok.append(index)
        else:
            failures.append(data[:200].decode(errors="replace"))

    start = time.perf_counter()
    Pool(concurrency).map(one, range(runs))
    return {"ok": len(ok), "wall_s": time.perf_counter() - start, "failures": failures[:3]}


def _child(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.distributed", "--gevent", *args],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _stream_client(variant: str, url: str, streams: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.serve", "--gevent", f"--variant={variant}",
         f"--url={url}", f"--streams={streams}"],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- the processes under test


class Deployment:
    """Redis, PostgreSQL, the apps; starts serve and worker processes on them."""

    def __init__(self, workdir: Path, model_url: str, database: str, broker: str) -> None:
        self.workdir = workdir
        self.database = database
        self.broker = broker
        self.apps = workdir / "apps"
        self.apps.mkdir(exist_ok=True)
        (self.apps / "stream.yml").write_text(yaml.safe_dump(flow()))
        (self.apps / "echo.yml").write_text(yaml.safe_dump(echo_flow()))
        self.models = workdir / "models.yaml"
        self.models.write_text(settings_yaml(model_url))
        self.env = {
            **os.environ,
            "FIRSTGATE_APP_KEY_STREAM": KEY,
            "FIRSTGATE_APP_KEY_ECHO": ECHO_KEY,
        }
        self._count = 0

    def _start(self, args: list[str], ready: str) -> tuple[subprocess.Popen[str], str]:
        self._count += 1
        log_path = self.workdir / f"process-{self._count}.log"
        with log_path.open("w") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "firstgate.serve.cli", *args], env=self.env,
                stdout=log, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        give_up = time.monotonic() + 120
        while time.monotonic() < give_up:
            found = re.search(ready, log_path.read_text())
            if found:
                return process, found.group(0)
            if process.poll() is not None:
                break
            time.sleep(0.05)
        process.kill()
        raise RuntimeError(log_path.read_text())

    @contextmanager
    def serve(self, *, broker: bool) -> Iterator[tuple[subprocess.Popen[str], str]]:
        args = ["serve", str(self.apps), "--port", "0", "--models", str(self.models)]
        args += ["--database-url", self.database]
        args += ["--broker", self.broker] if broker else []
        process, url = self._start(args, r"http://[\d.]+:\d+")
        try:
            yield process, url
        finally:
            _stop(process)

    @contextmanager
    def workers(self, count: int) -> Iterator[list[subprocess.Popen[str]]]:
        args = ["worker", str(self.apps), "--models", str(self.models)]
        args += ["--database-url", self.database, "--broker", self.broker]
        started: list[subprocess.Popen[str]] = []
        try:
            for _ in range(count):
                started.append(self._start(args, r"worker \S+ ready")[0])
            yield started
        finally:
            for process in started:
                _stop(process)


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def _services(workdir: Path) -> Iterator[tuple[str, str]]:
    """(redis URL, PostgreSQL URL), started for this run."""
    from tests import pg_cluster
    from tests.postgres_support import ENV_URL, fresh_database
    from tests.redis_support import RedisServer

    with ExitStack() as stack:
        redis = RedisServer(workdir / "redis")
        redis.start()
        stack.callback(redis.stop)
        server = os.environ.get(ENV_URL)
        if not server:
            # A directory of its own: the server runs as another user.
            pg_dir = tempfile.mkdtemp(prefix="firstgate-pg-")
            stack.callback(shutil.rmtree, pg_dir, True)
            server = pg_cluster.start_cluster(pg_dir)
            stack.callback(pg_cluster.stop_cluster, pg_dir)
        database = stack.enter_context(fresh_database(server))
        yield redis.url, database


def _usage(processes: list[subprocess.Popen[str]], measure: Any) -> tuple[Any, float, float]:
    """Run `measure()`; the CPU seconds and peak RSS growth (bytes) of `processes`."""
    cpu = [proc_cpu(p.pid) for p in processes]
    rss = [proc_rss(p.pid) for p in processes]
    samplers = [PeakRss(p.pid) for p in processes]
    result = measure()
    peaks = [s.stop() for s in samplers]
    used = sum(proc_cpu(p.pid) - c for p, c in zip(processes, cpu, strict=True))
    grown = sum(peak - r for peak, r in zip(peaks, rss, strict=True))
    return result, used, grown


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-runs", type=int, default=200)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--stops", type=int, default=200)
    parser.add_argument("--variant", choices=["latency", "throughput"])
    parser.add_argument("--url")
    parser.add_argument("--gevent", action="store_true")
    args = parser.parse_args()
    if args.variant == "latency":
        print(json.dumps(run_latency(args.url, args.latency_runs)))
        return
    if args.variant == "throughput":
        print(json.dumps(run_throughput(args.url, args.runs, args.concurrency)))
        return
    print(
        f"\n== 13. serve --broker: runs on Celery workers (Redis 7, PostgreSQL) vs in-process"
        f" serve; {args.runs} trivial runs, {args.streams} slow streams, {args.stops} stops ==",
        flush=True,
    )
    latency = [f"--latency-runs={args.latency_runs}"]
    throughput = [f"--runs={args.runs}", f"--concurrency={args.concurrency}"]
    figures: dict[str, Any] = {}
    with ExitStack() as stack:
        model = stack.enter_context(
            ServerProcess("slow", f"--interval={INTERVAL_S}", f"--frames={FRAMES}")
        )
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fg-bench-dist-")))
        broker, database = stack.enter_context(_services(workdir))
        deployment = Deployment(workdir, model.base_url, database, broker)
        with deployment.serve(broker=False) as (process, url):
            figures["local_latency"] = _child("--variant=latency", f"--url={url}", *latency)
            figures["local_rate"] = _child("--variant=throughput", f"--url={url}", *throughput)
            figures["local_streams"], cpu, rss = _usage(
                [process], lambda: _stream_client("client", url, args.streams)
            )
            figures["local_usage"] = (cpu, rss)
        with deployment.serve(broker=True) as (api, url):
            with deployment.workers(1):
                figures["rate_1"] = _child("--variant=throughput", f"--url={url}", *throughput)
            with deployment.workers(2) as workers:
                figures["latency"] = _child("--variant=latency", f"--url={url}", *latency)
                figures["rate_2"] = _child("--variant=throughput", f"--url={url}", *throughput)
                figures["streams"], cpu, rss = _usage(
                    [api, *workers], lambda: _stream_client("client", url, args.streams)
                )
                figures["usage"] = (cpu, rss)
                time.sleep(3.0)
                figures["stops"] = _stream_client("stop", url, args.stops)
    report(figures, args)


def report(f: dict[str, Any], args: argparse.Namespace) -> None:
    local, remote = f["local_latency"]["latencies"], f["latency"]["latencies"]
    line(
        f"queue latency (send -> workflow_started, {len(remote)} runs one at a time):"
        f" p50 {ms(percentile(remote, 50))} p99 {ms(percentile(remote, 99))}"
        f" | in-process serve p50 {ms(percentile(local, 50))} p99 {ms(percentile(local, 99))}"
        f" | ratio p50 {ratio(percentile(remote, 50), percentile(local, 50))}"
        f" p99 {ratio(percentile(remote, 99), percentile(local, 99))}"
        f" {f['latency']['failures'] or ''}"
    )

    def rate(r: dict[str, Any]) -> float:
        return r["ok"] / r["wall_s"] if r["wall_s"] else 0.0

    r1, r2, r0 = rate(f["rate_1"]), rate(f["rate_2"]), rate(f["local_rate"])
    line(
        f"trivial runs/s ({args.runs} blocking, {args.concurrency} at a time): 1 worker"
        f" {r1:.1f} ({f['rate_1']['ok']} ok), 2 workers {r2:.1f} ({f['rate_2']['ok']} ok),"
        f" scaling {ratio(r2, r1)} | in-process serve {r0:.1f}; 2 workers / in-process"
        f" {ratio(r2, r0)} {f['rate_1']['failures'] or ''}{f['rate_2']['failures'] or ''}"
    )
    s, s0 = f["streams"], f["local_streams"]
    cpu, rss = f["usage"]
    cpu0, rss0 = f["local_usage"]
    n = args.streams
    line(
        f"{n} concurrent slow streams across 2 workers: complete {s['complete']}/{n}"
        f" {s['failures'] or ''} CPU {cpu / n * 1000:.2f} ms/stream, RSS"
        f" {rss / n / 1024:.1f} KiB/stream (API + workers) | in-process serve: complete"
        f" {s0['complete']}/{n}, CPU {cpu0 / n * 1000:.2f} ms/stream, RSS {rss0 / n / 1024:.1f}"
        f" KiB/stream | ratio CPU {ratio(cpu, cpu0)}, RSS {ratio(rss, rss0)}"
    )
    stops = f["stops"]
    latencies = stops["stop_to_end_s"]
    p99 = percentile(latencies, 99)
    ok = p99 <= 0.050 and stops["complete"] == stops["streams"]
    line(
        f"stop-to-stream-end across processes ({len(latencies)} streams, 20 at a time):"
        f" p50 {ms(percentile(latencies, 50))} p99 {ms(p99)}"
        f" max {ms(max(latencies, default=0))} stopped {stops['complete']}/{stops['streams']}"
        f" {stops['failures'] or ''} [{'ok' if ok else 'MISSED (target p99 50 ms)'}]"
    )


if __name__ == "__main__":
    main()
