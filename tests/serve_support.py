"""Real processes for the serve tests: the fake model (`tests/fakes/echo_model.py`),
`firstgate serve` itself, and the client SDKs, each installed apart (both ship
a package named `dify_client`) and run unchanged in their own interpreter."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
APPS = ROOT / "tests" / "serve_apps"
SDK_DIR = ROOT / ".venv" / "sdks"
# The client SDKs under test, pinned (the Makefile installs these exact versions).
SDKS = {"dify-client": "0.1.10", "dify-client-python": "1.0.3"}
KEYS = {"chat": "chat-key-0123456789", "story": "story-key-0123456789"}


@contextmanager
def echo_model(interval: float = 0.02) -> Iterator[str]:
    """The fake model server; yields its OpenAI-compatible base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.echo_model", "--interval", str(interval)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        port = int(line.split()[1])
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def models_file(directory: Path, base_url: str) -> Path:
    path = directory / "models.yaml"
    path.write_text(
        f"providers:\n  local: {{kind: openai-compatible, base_url: {base_url}}}\ndefault: local\n"
    )
    return path


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str
    log: Path

    def key_client(self, app: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {KEYS[app]}"}, timeout=30
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def serve(
    tmp: Path,
    base_url: str,
    *,
    apps: Path = APPS,
    database: str | None = None,
    extra: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    keys: Mapping[str, str] = KEYS,
) -> Iterator[Server]:
    """`firstgate serve` on a free port, as a user starts it; stopped with SIGTERM."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTGATE_APP_KEY_")}
    environ.update({f"FIRSTGATE_APP_KEY_{stem.upper()}": key for stem, key in keys.items()})
    environ.update(env or {})
    where = ["--database-url", database] if database else ["--state", str(tmp / "state.db")]
    log = tmp / "serve.log"
    command = [sys.executable, "-m", "firstgate.serve.cli", "serve", str(apps), "--port", "0"]
    command += ["--models", str(models_file(tmp, base_url)), *where, *extra]
    with log.open("w") as sink:
        process = subprocess.Popen(
            command, cwd=ROOT, env=environ, stdout=sink, stderr=subprocess.STDOUT, text=True
        )
    try:
        url = _wait_listening(process, log)
        yield Server(process, url, log)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_listening(process: subprocess.Popen[str], log: Path, timeout: float = 60.0) -> str:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        found = re.search(r"http://[\d.]+:\d+/", log.read_text(errors="replace"))
        if found:
            return found.group(0).rstrip("/")
        if process.poll() is not None:
            raise AssertionError(f"firstgate serve exited: {log.read_text(errors='replace')}")
        time.sleep(0.05)
    raise AssertionError(f"firstgate serve did not start: {log.read_text(errors='replace')}")


def sdk_path(name: str) -> Path:
    path = SDK_DIR / f"{name}-{SDKS[name]}"
    if not path.is_dir():
        raise AssertionError(f"{name} {SDKS[name]} is not installed in {path}: run `make setup`")
    return path


def run_sdk(name: str, script: str, *args: str, timeout: float = 120) -> Any:
    """Run `tests/sdk_scripts/<script>` with only that SDK importable; its JSON output."""
    env = {**os.environ, "PYTHONPATH": str(sdk_path(name)), "PYTHONNOUSERSITE": "1"}
    done = subprocess.run(
        [sys.executable, "-s", str(ROOT / "tests" / "sdk_scripts" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(f"{script} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])
