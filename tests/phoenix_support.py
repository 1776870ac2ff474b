"""A real OTLP backend for the tracing tests: Arize Phoenix, installed in its own
virtual environment (`.venv/phoenix`, built by `make setup`), started once per
test session on free loopback ports with a working directory of its own, and
read back through its REST API (`GET /v1/projects/{project}/spans`)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
PHOENIX = Path(os.environ.get("FIRSTGATE_PHOENIX", ROOT / ".venv" / "phoenix" / "bin" / "phoenix"))
START_TIMEOUT_S = 180.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Phoenix:
    url: str
    log: Path

    @property
    def traces_endpoint(self) -> str:
        return f"{self.url}/v1/traces"

    def spans(self, project: str = "default") -> list[dict[str, Any]]:
        """Every span Phoenix holds for `project`, newest first."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while True:
                params: dict[str, Any] = {"limit": 1000}
                if cursor:
                    params["cursor"] = cursor
                reply = client.get(f"/v1/projects/{project}/spans", params=params)
                if reply.status_code == 404:
                    return found  # no span has reached the project yet
                reply.raise_for_status()
                doc = reply.json()
                found.extend(doc["data"])
                cursor = doc.get("next_cursor")
                if not cursor:
                    return found

    def trace(self, trace_id: str, *, at_least: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The spans of one trace, once at least `at_least` of them arrived
        (Phoenix writes what it receives in the background)."""
        give_up = time.monotonic() + timeout
        while True:
            spans = [s for s in self.spans() if s["context"]["trace_id"] == trace_id]
            if len(spans) >= at_least or time.monotonic() > give_up:
                return spans
            time.sleep(0.3)

    def find(self, test: Any, *, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The spans `test` accepts, waiting until there is one."""
        give_up = time.monotonic() + timeout
        while True:
            spans = [s for s in self.spans() if test(s)]
            if spans or time.monotonic() > give_up:
                return spans
            time.sleep(0.3)


@contextmanager
def phoenix_server() -> Iterator[Phoenix]:
    if not PHOENIX.exists():
        raise AssertionError(f"Arize Phoenix is not installed at {PHOENIX}: run `make setup`")
    workdir = Path(tempfile.mkdtemp(prefix="firstgate-phoenix-"))
    port, grpc = _free_port(), _free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc),
        # Nothing leaves the machine: no product telemetry, no external assets.
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
    }
    log = workdir / "phoenix.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [str(PHOENIX), "serve"], cwd=workdir, env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        give_up = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise AssertionError(f"Phoenix exited: {log.read_text(errors='replace')[-3000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > give_up:
                raise AssertionError(
                    f"Phoenix did not start: {log.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(0.3)
        yield Phoenix(url, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)
