"""One sandbox worker process, seen from the runtime: start it, hand it jobs,
cancel a job, stop it.

The worker (`sandbox/worker/zygote.py`) runs `python -I` with the scrubbed
environment of `confinement.BASE_ENV`, in a fresh temporary directory, in a
session of its own (a terminal's Ctrl-C reaches the runtime, which aborts the
run, not the worker). It talks over a socket pair with length-prefixed JSON
frames. Its answers are untrusted: every read has a size cap and a deadline.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.errors import CodeRuntimeUnavailableError
from sandbox.executor import Cancellable
from sandbox.worker import framing

ZYGOTE = str(Path(__file__).resolve().parent / "worker" / "zygote.py")
# The worker enforces the job's timeout itself; this is how much later the
# runtime gives up on the worker as a whole.
GRACE_S = 2.0


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    wall_s: float = 10.0
    cpu_s: float = 5.0
    memory_mb: int = 256
    file_size_mb: int = 16
    open_files: int = 64
    processes: int = 32
    output_bytes: int = 4 * 1024 * 1024

    def as_frame(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything a worker is started with; the same for every worker of a pool."""

    python: str
    node: str | None
    read_only: tuple[str, ...]
    env: dict[str, str]
    limits: SandboxLimits
    network: bool = False
    require_landlock: bool = True
    # Options of the Jinja2 environment template jobs use: the worker builds one
    # ahead (its lexer is cached) so a template job only compiles its template.
    jinja_options: dict[str, Any] | None = None
    max_job_bytes: int = 64 * 1024 * 1024
    start_timeout_s: float = 30.0


class WorkerBroken(Exception):
    """The worker itself misbehaved (no answer in time, a bad frame, gone)."""


class WorkerTimeout(WorkerBroken):
    pass


_job_ids = itertools.count(1)


class WorkerProcess:
    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.base_dir = tempfile.mkdtemp(prefix="firstgate-sandbox-")
        self.isolation: dict[str, Any] = {}
        self._send_lock = threading.Lock()
        ours, theirs = socket.socketpair()
        self._sock = ours
        try:
            with open(os.path.join(self.base_dir, "worker.log"), "wb") as log:
                self.process = subprocess.Popen(
                    [config.python, "-I", ZYGOTE, str(theirs.fileno())],
                    pass_fds=(theirs.fileno(),),
                    env=dict(config.env),
                    cwd=self.base_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    start_new_session=True,
                )
        except OSError as exc:
            self._cleanup_files()
            raise CodeRuntimeUnavailableError("errors.code.workerStart", detail=str(exc)) from exc
        finally:
            theirs.close()
        try:
            self._handshake()
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    def _handshake(self) -> None:
        config = self.config
        framing.send(
            self._sock,
            {
                "base_dir": self.base_dir,
                "read_only": list(config.read_only),
                "writable": [self.base_dir, "/dev/null"],
                "network": config.network,
                "jinja_options": config.jinja_options,
                "limits": config.limits.as_frame(),
                "node": config.node,
                "max_frame_bytes": config.max_job_bytes,
            },
        )
        deadline = time.monotonic() + config.start_timeout_s
        try:
            ready = framing.receive(self._sock, 1 << 16, deadline)
        except framing.FrameError as exc:
            raise CodeRuntimeUnavailableError(
                "errors.code.workerStart", detail=f"{exc}. {self._log_tail()}".strip()
            ) from None
        isolation = ready.get("isolation") if isinstance(ready, dict) else None
        if not isinstance(isolation, dict):
            raise CodeRuntimeUnavailableError("errors.code.workerStart", detail=repr(ready)[:200])
        self.isolation = isolation
        if not isolation.get("seccomp"):
            raise CodeRuntimeUnavailableError(
                "errors.code.isolationMissing",
                feature="seccomp",
                detail=str(isolation.get("seccomp_error", "")),
            )
        if config.require_landlock and not isolation.get("landlock"):
            raise CodeRuntimeUnavailableError(
                "errors.code.landlockMissing", detail=str(isolation.get("landlock_error", ""))
            )

    def _log_tail(self) -> str:
        try:
            data = Path(self.base_dir, "worker.log").read_bytes()[-2000:]
        except OSError:
            return ""
        lines = data.decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else ""

    def run(self, job: dict[str, Any], cancel: Cancellable | None) -> dict[str, Any]:
        """Send one job and wait for its answer (the worker enforces the timeout;
        this waits that long plus a grace before calling the worker broken)."""
        job_id = next(_job_ids)
        limits = self.config.limits
        cap = limits.output_bytes * 6 + 65536  # JSON escapes may grow the result
        try:
            with self._send_lock:
                framing.send(self._sock, {**job, "id": job_id})
            deadline = time.monotonic() + limits.wall_s + GRACE_S
            attached = cancel.attached(lambda _reason: self._cancel(job_id)) if cancel else None
            with attached or contextlib.nullcontext():
                while True:
                    answer = framing.receive(self._sock, cap, deadline)
                    if isinstance(answer, dict) and answer.get("id") == job_id:
                        return answer
        except framing.FrameTimeout:
            raise WorkerTimeout("the worker did not answer in time") from None
        except (framing.FrameError, OSError) as exc:
            raise WorkerBroken(str(exc)) from None

    def _cancel(self, job_id: int) -> None:
        with contextlib.suppress(OSError), self._send_lock:
            framing.send(self._sock, {"cancel": job_id})

    def stop(self, grace_s: float = 0.5) -> None:
        """Close the pipe (the worker exits on its own), then make sure of it."""
        with contextlib.suppress(OSError):
            self._sock.close()
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
        # The worker leads its own process group; its job processes are in it.
        with contextlib.suppress(OSError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5.0)
        self._cleanup_files()

    def _cleanup_files(self) -> None:
        shutil.rmtree(self.base_dir, ignore_errors=True)
