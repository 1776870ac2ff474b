"""One sandbox worker process, seen from the runtime: start it, run jobs in
the job processes it forks, stop it.

The worker (`sandbox/worker/zygote.py`) runs `python -I` with the scrubbed
environment of `confinement.BASE_ENV`, in a fresh temporary directory (marked
as the runtime's by a lock the runtime holds while it lives; the worker's
janitor removes it when the runtime lets go, even by dying), in a session of
its own (a terminal's Ctrl-C reaches the runtime, which aborts the run, not
the worker). It talks over a socket pair with length-prefixed JSON
frames, and hands over each job process it forks as a `Channel` (the job
process's socket and a pidfd). The runtime sends the job and reads the
result directly, with the job's deadline and the result's size cap, and ends
the process through its pidfd. Everything the worker and its job processes
send is untrusted: every read has a size cap and a deadline.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from firstgate.common.cancel import Cancellable
from firstgate.sandbox.confinement import WRITABLE_DEVICES
from firstgate.sandbox.errors import CodeRuntimeUnavailableError
from firstgate.sandbox.executor import DEFAULT_TIMEOUT_S
from firstgate.sandbox.worker import framing

ZYGOTE = str(Path(__file__).resolve().parent / "worker" / "zygote.py")
# How much longer than a job's timeout the runtime waits for the worker itself
# (a job process to hand out, how one ended) before it calls the worker broken.
GRACE_S = 2.0
# Every worker directory is <temp>/firstgate-sandbox-*, with OWNER_MARK in it:
# a file its runtime holds an exclusive flock on while it lives.
DIR_PREFIX = "firstgate-sandbox-"
OWNER_MARK = ".owner"


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    wall_s: float = DEFAULT_TIMEOUT_S
    cpu_s: float = 5.0
    memory_mb: int = 256
    file_size_mb: int = 16
    open_files: int = 64
    processes: int = 32
    output_bytes: int = 4 * 1024 * 1024
    # All job directories of one worker together (checked every 0.1 s).
    disk_mb: int = 64

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
    start_timeout_s: float = 30.0
    # Tests only: use no Landlock feature newer than this ABI, as on an older
    # kernel (below 6: no signal scope), to show what the other layers hold alone.
    landlock_max_abi: int | None = None


@dataclass
class Channel:
    """A job process as the runtime holds it: its end of the process's socket and
    a pidfd (a kill through it cannot hit a reused pid)."""

    pid: int
    sock: socket.socket
    pidfd: int

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            os.close(self.pidfd)


# Limits a job process reports by kind (it does not know their values).
_LIMIT_OF = {"memory": "memory_mb", "open_files": "open_files"}
# More announced job processes than this is a worker misbehaving.
_MAX_CHANNELS = 8


class WorkerBroken(Exception):
    """The worker itself misbehaved (no answer in time, a bad frame, gone)."""


class WorkerTimeout(WorkerBroken):
    pass


def make_worker_dir() -> tuple[str, BinaryIO]:
    """A fresh worker directory, and its owner mark, open and locked."""
    while True:
        path = tempfile.mkdtemp(prefix=DIR_PREFIX)
        mark = open(os.path.join(path, OWNER_MARK), "xb", buffering=0)  # held while we live
        fcntl.flock(mark, fcntl.LOCK_EX)
        if os.fstat(mark.fileno()).st_nlink:  # not reaped between its creation and the lock
            return path, mark
        mark.close()


def reap_stale_dirs(root: str | None = None) -> list[str]:
    """Remove the worker directories whose runtime is gone (nobody holds their
    owner mark): what a runtime killed together with its workers leaves. A
    directory without a mark, or not ours, is left alone."""
    removed: list[str] = []
    with os.scandir(root or tempfile.gettempdir()) as entries:
        for entry in entries:
            if not entry.name.startswith(DIR_PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid == os.geteuid() and _reap(entry.path):
                    removed.append(entry.path)
    return removed


def _reap(path: str) -> bool:
    mark = os.open(os.path.join(path, OWNER_MARK), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(mark, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # its runtime is alive
        # A runtime making this directory right now waits for the lock, then
        # finds its mark unlinked and makes another (see make_worker_dir).
        shutil.rmtree(path, ignore_errors=True)
        return True
    finally:
        os.close(mark)


class WorkerProcess:
    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.base_dir, self._owner_mark = make_worker_dir()
        self.isolation: dict[str, Any] = {}
        self.janitor_pid: int | None = None  # the worker's janitor, once it is ready
        self._send_lock = threading.Lock()
        self._spare: deque[Channel] = deque()  # Python/Jinja2 job processes, forked ahead
        self._spawned: deque[Channel] = deque()  # Node.js ones, forked on request
        ours, theirs = socket.socketpair()
        self._sock = ours
        # The janitor's pipe: its end of file tells the worker's janitor the runtime is gone.
        # A file object, closed by its own close(): gevent's os.close of a pipe waits for
        # the hub's next round, and so would the janitor.
        watched, alive = os.pipe()
        self._alive = open(alive, "wb", buffering=0)  # held until stop
        try:
            with open(os.path.join(self.base_dir, "worker.log"), "wb") as log:
                self.process = subprocess.Popen(
                    [config.python, "-I", ZYGOTE, str(theirs.fileno()), str(watched)],
                    pass_fds=(theirs.fileno(), watched),
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
            os.close(watched)
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
                "writable": [self.base_dir, *WRITABLE_DEVICES],
                "devices": list(WRITABLE_DEVICES),
                "network": config.network,
                "jinja_options": config.jinja_options,
                "limits": config.limits.as_frame(),
                "node": config.node,
                "landlock_max_abi": config.landlock_max_abi,
            },
        )
        deadline = time.monotonic() + config.start_timeout_s
        try:
            ready = self._control(deadline)
        except framing.FrameError as exc:
            raise CodeRuntimeUnavailableError(
                "errors.code.workerStart", detail=f"{exc}. {self._log_tail()}".strip()
            ) from None
        isolation = ready.get("isolation") if isinstance(ready, dict) else None
        if not isinstance(isolation, dict):
            raise CodeRuntimeUnavailableError("errors.code.workerStart", detail=repr(ready)[:200])
        self.isolation = isolation
        if isinstance(ready.get("janitor"), int):
            self.janitor_pid = ready["janitor"]
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

    # ---- job processes: the worker forks them, the runtime talks to them directly

    def _read_one(self, deadline: float) -> dict[str, Any] | None:
        """The worker's next frame; None when it was an announcement (a job
        process's channel and pidfd), which is kept for `_take`."""
        message, fds = framing.receive_with_fds(self._sock, 1 << 16, deadline)
        if not isinstance(message, dict):
            raise framing.FrameError(f"not an object: {message!r}"[:200])
        kind = "warm" if "warm" in message else "node" if "node" in message else None
        if kind is None:
            for fd in fds:
                os.close(fd)
            return message
        if len(fds) != 2 or len(self._spare) + len(self._spawned) >= _MAX_CHANNELS:
            for fd in fds:
                os.close(fd)
            raise framing.FrameError(f"bad announcement {message!r}"[:200])
        channel = Channel(int(message[kind]), socket.socket(fileno=fds[0]), fds[1])
        (self._spawned if kind == "node" else self._spare).append(channel)
        return None

    def _control(self, deadline: float) -> dict[str, Any]:
        """The worker's next frame that is not an announcement."""
        while True:
            message = self._read_one(deadline)
            if message is not None:
                return message

    def _take(self, node: bool, deadline: float) -> Channel:
        if node:
            with self._send_lock:
                framing.send(self._sock, {"spawn": "node"})
        spares = self._spawned if node else self._spare
        while not spares:
            if self._read_one(deadline) is not None:
                raise framing.FrameError("an answer nobody asked for")
        return spares.popleft()

    def _release(self, channel: Channel) -> None:
        channel.close()
        with contextlib.suppress(OSError), self._send_lock:
            framing.send(self._sock, {"release": channel.pid})

    def _ended(self, channel: Channel, deadline: float) -> dict[str, Any]:
        """Ask the worker how a job process that sent no result ended."""
        with self._send_lock:
            framing.send(self._sock, {"status": channel.pid})
        while True:
            message = self._control(deadline)
            if message.get("ended") == channel.pid and isinstance(message.get("answer"), dict):
                return message["answer"]

    def run(self, job: dict[str, Any], cancel: Cancellable | None) -> dict[str, Any]:
        """Hand one job to a job process of this worker and wait for its answer.

        The runtime holds the deadline (`wall_s`) and the size cap of the answer
        itself and ends the process through its pidfd when either is passed, or
        on a cancel. A process that closes its channel without an answer is
        classified by the worker (signal, limits, standard error).
        """
        limits = self.config.limits
        grace = time.monotonic() + limits.wall_s + GRACE_S
        try:
            channel = self._take(job.get("language") == "javascript", grace)
        except framing.FrameTimeout:
            raise WorkerTimeout("the worker did not provide a job process in time") from None
        except (framing.FrameError, OSError) as exc:
            raise WorkerBroken(str(exc)) from None
        cancelled = threading.Event()

        def on_cancel(_reason: str) -> None:
            cancelled.set()
            channel.kill()

        try:
            with cancel.attached(on_cancel) if cancel else contextlib.nullcontext():
                answer = self._talk(channel, job)
                if answer is not None:
                    return answer
            if cancelled.is_set():
                return {"status": "error", "kind": "cancelled"}
            try:
                return self._ended(channel, grace + GRACE_S)
            except framing.FrameTimeout:
                raise WorkerTimeout("the worker did not say how a job ended") from None
            except (framing.FrameError, OSError) as exc:
                raise WorkerBroken(str(exc)) from None
        finally:
            self._release(channel)

    def _talk(self, channel: Channel, job: dict[str, Any]) -> dict[str, Any] | None:
        """The job's answer, an answer for a limit the runtime enforced, or None
        when the process went away without one."""
        limits = self.config.limits
        with contextlib.suppress(OSError):  # if it died already, its status says how
            framing.send(channel.sock, job)
        deadline = time.monotonic() + limits.wall_s
        try:
            answer = framing.receive(channel.sock, limits.output_bytes, deadline)
        except framing.FrameTimeout:  # the release that follows ends the process
            return {"status": "error", "kind": "timeout", "limit": limits.wall_s}
        except framing.FrameTooLarge:
            return {"status": "error", "kind": "output", "limit": limits.output_bytes}
        except (framing.FrameError, OSError):
            return None
        if isinstance(answer, dict) and answer.get("status") in ("ok", "error"):
            if answer.get("kind") in _LIMIT_OF:
                answer["limit"] = getattr(limits, _LIMIT_OF[answer["kind"]])
            return answer
        return None

    def stop(self, grace_s: float = 0.5) -> None:
        """Close the pipe (the worker exits on its own), then make sure of it."""
        for channel in [*self._spare, *self._spawned]:
            channel.close()
        self._spare.clear()
        self._spawned.clear()
        with contextlib.suppress(OSError):
            self._sock.close()
        self._let_go()  # the janitor removes the directory, the worker waits for it
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

    def _let_go(self) -> None:
        """Close the janitor's pipe: its end of file tells the janitor we are done."""
        self._alive.close()

    def _cleanup_files(self) -> None:
        self._let_go()
        shutil.rmtree(self.base_dir, ignore_errors=True)
        self._owner_mark.close()  # after the removal: a reaper must not race it
