"""A real Prometheus server (Debian's `prometheus` package) for the metrics
tests: started on a free loopback port with its own storage directory,
scraping the given targets every second, queried through its HTTP API."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

START_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Prometheus:
    url: str
    log: Path

    def query(self, expression: str) -> list[dict[str, Any]]:
        reply = httpx.get(f"{self.url}/api/v1/query", params={"query": expression}, timeout=10)
        reply.raise_for_status()
        doc = reply.json()
        assert doc["status"] == "success", doc
        return list(doc["data"]["result"])

    def wait_for(self, expression: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The result of `expression` once it has one (scrapes come every second)."""
        give_up = time.monotonic() + timeout
        while True:
            found = self.query(expression)
            if found or time.monotonic() > give_up:
                return found
            time.sleep(0.5)

    def targets(self) -> list[dict[str, Any]]:
        reply = httpx.get(f"{self.url}/api/v1/targets", timeout=10)
        reply.raise_for_status()
        return list(reply.json()["data"]["activeTargets"])


@contextmanager
def prometheus_server(targets: Sequence[str]) -> Iterator[Prometheus]:
    """`targets`: `host:port` addresses whose `/metrics` is scraped."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise AssertionError("Prometheus is not installed: run `make system-packages`")
    workdir = Path(tempfile.mkdtemp(prefix="firstgate-prometheus-"))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "firstgate", "static_configs": [{"targets": list(targets)}]}
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    port = _free_port()
    log = workdir / "prometheus.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            cwd=workdir,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        give_up = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise AssertionError(
                    f"Prometheus exited: {log.read_text(errors='replace')[-3000:]}"
                )
            try:
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > give_up:
                raise AssertionError(
                    f"Prometheus did not start: {log.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(0.2)
        yield Prometheus(url, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)
