"""Real parts for the distributed-mode tests: a Redis server of the tests' own (Debian's
`redis-server`, installed by `.ci/system-packages`) on a free loopback port, and
`firstgate worker` processes started as a user starts them.

Redis is configured as the README says a deployment should be for runs'
events to survive a restart: the append-only file, in the server's own
directory, with `appendfsync everysec`: Redis writes the file before it
replies, so a server killed with SIGKILL and started again has every event it
acknowledged (the test of a Redis restart does exactly that); `always` (an
fsync before every reply) is for machines that may lose power.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.serve_support import APPS, KEYS, ROOT, models_file


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise AssertionError(
            "redis-server is not installed (Debian package redis-server: .ci/system-packages)"
        )
    return found


@dataclass
class RedisServer:
    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    # "always": fsynced before every reply; "everysec": written before every reply
    # (a killed server loses nothing; a machine that loses power, up to 1 s).
    fsync: str = "everysec"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [
            redis_server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--appendonly", "yes",
            "--appendfsync", self.fsync,
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        give_up = time.monotonic() + 30
        while time.monotonic() < give_up:
            if self.process.poll() is not None:
                log = (self.directory / "redis.log").read_text(errors="replace")
                raise AssertionError(f"redis-server exited: {log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def kill(self) -> None:
        """SIGKILL: no shutdown save; what survives is what the append-only file has."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def redis_server(directory: Path) -> Iterator[RedisServer]:
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Worker:
    process: subprocess.Popen[str]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def _environ(env: Mapping[str, str] | None, keys: Mapping[str, str]) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTGATE_APP_KEY_")}
    environ.update({f"FIRSTGATE_APP_KEY_{stem.upper()}": key for stem, key in keys.items()})
    environ.update(env or {})
    return environ


@contextmanager
def worker(
    tmp: Path,
    base_url: str,
    broker: str,
    database: str,
    *,
    name: str = "worker",
    apps: Path = APPS,
    extra: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    keys: Mapping[str, str] = KEYS,
    host: str | None = None,
) -> Iterator[Worker]:
    """`firstgate worker` as a user starts it, once it consumes; SIGTERM at the end.
    `host`: the host name it sees (a UTS namespace of its own, as root), so that
    it stands for a worker on another machine: what it holds in the store is not
    known to be gone when it dies (no pid to look at)."""
    log = tmp / f"{name}.log"
    command = [sys.executable, "-m", "firstgate.serve.cli", "worker", str(apps), "--broker", broker]
    command += ["--database-url", database, "--models", str(models_file(tmp, base_url))]
    command += list(extra)
    if host is not None:
        # unshare and sh exec in turn: the worker is the process started (one pid).
        command = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *command]
    with log.open("w") as sink:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=_environ(env, keys),
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    running = Worker(process, log)
    try:
        _wait_ready(running)
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(running: Worker, timeout: float = 60.0) -> None:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        if re.search(r"worker \S+ ready", running.output()):
            return
        if running.process.poll() is not None:
            raise AssertionError(f"firstgate worker exited: {running.output()}")
        time.sleep(0.05)
    raise AssertionError(f"firstgate worker did not start: {running.output()}")
