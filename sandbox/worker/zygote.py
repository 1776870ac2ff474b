"""The sandbox worker: a pre-started process that runs every job in a fresh,
confined process of its own.

Stdlib only (plus Jinja2 for template jobs when the interpreter has it). The
runtime starts it as `python -I zygote.py FD` with a scrubbed environment in a
temporary directory of its own; FD is its end of a socket pair to the runtime.

1. The first frame is the configuration. The worker imports what jobs will
   need, then confines itself for good: capabilities dropped (when started as
   root), no_new_privs, Landlock (file-system allow-list) and the base seccomp
   filter (no sockets, no io_uring, no ptrace, ...). It answers with a `ready`
   frame that reports which layers are in force.
2. It keeps one job process forked ahead ("warm"): already in its own job
   directory, with its resource limits and the job seccomp filter (no new
   processes, signals only to itself), waiting for a job on a pipe. A Python
   or Jinja2 job goes to the warm process; a JavaScript job forks a process
   that becomes Node.js. The worker reads at most the output cap from the
   result pipe, enforces the wall-clock timeout, answers with one frame, then
   reaps the process, removes its directory and forks the next warm one.
   A `cancel` frame during a job kills the job's process at once.

No job ever runs in the worker itself, and no process runs two jobs, so no
state of one job can reach the next.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Started with -I, so this directory is not on sys.path: the worker's own modules are.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import framing  # noqa: E402
import job as job_process  # noqa: E402
import landlock  # noqa: E402
import seccomp  # noqa: E402

STDERR_TAIL = 4096
WARM_AHEAD = 2
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPSET = {"x86_64": 126, "aarch64": 91}
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_LENGTH = struct.Struct(">I")

# Modules user code commonly imports: loaded once here, shared by every job's fork.
PRELOAD = (
    "base64", "bisect", "calendar", "collections", "copy", "csv", "dataclasses", "datetime",
    "decimal", "enum", "fractions", "functools", "hashlib", "heapq", "hmac", "html",
    "itertools", "math", "operator", "random", "re", "statistics", "string", "textwrap",
    "typing", "unicodedata", "urllib.parse", "uuid",
)  # fmt: skip


# ---- confinement of the worker itself


def drop_capabilities() -> bool:
    """As root: empty the bounding, ambient and process capability sets, so that
    neither this process nor anything it executes holds a capability."""
    if os.geteuid() != 0:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # past the last capability this kernel knows
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable}, all zero
    number = _CAPSET.get(os.uname().machine)
    if number is None or libc.syscall(number, header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    return True


def confine(config: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = {"uid": os.getuid(), "capabilities_dropped": drop_capabilities()}
    seccomp.no_new_privs()
    try:
        report["landlock"] = landlock.restrict(
            config["read_only"], config["writable"], network=config["network"]
        )
    except OSError as exc:
        report["landlock"] = None
        report["landlock_error"] = str(exc)
    try:
        seccomp.install(seccomp.base_rules(network=config["network"]))
        report["seccomp"] = True
    except OSError as exc:
        report["seccomp"] = False
        report["seccomp_error"] = str(exc)
    return report


def preload(config: dict[str, Any]) -> None:
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    options = config.get("jinja_options")
    if options is not None:
        # Building an environment compiles its lexer (cached per set of options);
        # done here once, every forked job finds it ready.
        with contextlib.suppress(Exception):
            from jinja2.sandbox import SandboxedEnvironment

            warm = SandboxedEnvironment(**options)
            warm.from_string("{% for x in y %}{{ x|upper }}{% endfor %}").render(y=["a"])


# ---- job processes


@dataclass
class Child:
    pid: int
    job_dir: str
    out_r: int
    err_r: int
    job_w: int | None = None  # warm processes read their job from here


def fork_child(
    sock: socket.socket,
    config: dict[str, Any],
    serve: Callable[[str, int, int, int | None], None],
    *,
    job_pipe: bool,
) -> Child:
    """Fork a job process that runs `serve(job_dir, out_w, err_w, job_r)` and never returns."""
    job_dir = tempfile.mkdtemp(prefix="job-", dir=config["base_dir"])
    job_r, job_w = os.pipe() if job_pipe else (None, None)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        sock.close()
        serve(job_dir, out_w, err_w, job_r)
    for fd in (job_r, out_w, err_w):
        if fd is not None:
            os.close(fd)
    return Child(pid, job_dir, out_r, err_r, job_w)


def fork_warm(sock: socket.socket, config: dict[str, Any]) -> Child:
    def serve(job_dir: str, out_w: int, err_w: int, job_r: int | None) -> None:
        assert job_r is not None
        job_process.serve_warm(config, job_dir, job_r, out_w, err_w)

    return fork_child(sock, config, serve, job_pipe=True)


def fork_node(sock: socket.socket, config: dict[str, Any], job: dict[str, Any]) -> Child:
    def serve(job_dir: str, out_w: int, err_w: int, _job_r: int | None) -> None:
        job_process.serve_node(config, job, job_dir, out_w, err_w)

    return fork_child(sock, config, serve, job_pipe=False)


def hand_over(child: Child, job: dict[str, Any]) -> bool:
    """Send the job to a warm process; False when it is gone."""
    assert child.job_w is not None
    body = json.dumps(job, ensure_ascii=False).encode("utf-8")
    try:
        view = memoryview(_LENGTH.pack(len(body)) + body)
        while view:
            view = view[os.write(child.job_w, view) :]
        return True
    except OSError:
        return False
    finally:
        os.close(child.job_w)
        child.job_w = None


def supervise(
    sock: socket.socket, child: Child, job: dict[str, Any], limits: dict[str, Any]
) -> tuple[dict[str, Any], bool]:
    """Watch one job to its end; returns (the answer, whether the runtime is gone)."""
    deadline = time.monotonic() + float(limits["wall_s"])
    cap = int(limits["output_bytes"])
    pidfd = os.pidfd_open(child.pid)
    output = bytearray()
    stderr = bytearray()
    verdict: str | None = None  # set when we end the job ourselves
    status: int | None = None
    usage = None
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                verdict = "timeout"
                break
            watch = [child.out_r, child.err_r, sock, pidfd]
            ready, _, _ = select.select(watch, [], [], remaining)
            if sock in ready:
                message = _control(sock)
                if message is None:
                    verdict = "orphaned"
                    break
                if message.get("cancel") == job.get("id"):
                    verdict = "cancelled"
                    break
            if child.err_r in ready:
                stderr += os.read(child.err_r, 65536)
                del stderr[:-STDERR_TAIL]
            if child.out_r in ready:
                chunk = os.read(child.out_r, 65536)
                output += chunk
                if len(output) > cap:
                    verdict = "output"
                    break
                if not chunk:
                    result = _result(output)
                    if result is not None:
                        # Complete: answer now; the process is ended and reaped after.
                        return _finish_result(result, limits), False
                    child.out_r = _closed(child.out_r)
            if pidfd in ready:
                _, status, usage = os.wait4(child.pid, 0)
                break
    finally:
        os.close(pidfd)
    if status is None:
        kill(child.pid)
        _, status, usage = os.wait4(child.pid, 0)
        child.pid = 0
    else:
        child.pid = 0
        with contextlib.suppress(OSError):  # what it wrote just before it died
            output += os.read(child.out_r, cap + 1 - len(output)) if child.out_r >= 0 else b""
            stderr += os.read(child.err_r, 65536)
    cpu = usage.ru_utime + usage.ru_stime if usage else 0.0
    answer = classify(
        verdict, status, bytes(output), stderr.decode("utf-8", "replace"), limits, cpu
    )
    return answer, verdict == "orphaned"


def _closed(fd: int) -> int:
    # A pipe at EOF stays readable for ever: swap it for one that never is.
    os.close(fd)
    read_end, write_end = os.pipe()
    os.close(write_end)
    return read_end


def _control(sock: socket.socket) -> dict[str, Any] | None:
    try:
        message = framing.receive(sock, 4096)
    except framing.FrameError:
        return None
    return message if isinstance(message, dict) else {}


def _result(output: bytearray) -> dict[str, Any] | None:
    if not output:
        return None
    try:
        result = json.loads(output.decode("utf-8"))
    except ValueError:
        return None
    return result if isinstance(result, dict) and "status" in result else None


def kill(pid: int) -> None:
    if pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def classify(
    verdict: str | None, status: int, output: bytes, stderr: str, limits: dict, cpu: float
) -> dict[str, Any]:
    if verdict == "timeout":
        return {"status": "error", "kind": "timeout", "limit": limits["wall_s"]}
    if verdict == "output":
        return {"status": "error", "kind": "output", "limit": limits["output_bytes"]}
    if verdict is not None:
        return {"status": "error", "kind": verdict}
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= float(limits["cpu_s"])):
            return {"status": "error", "kind": "cpu", "limit": limits["cpu_s"]}
        if sig == signal.SIGXFSZ:
            return {"status": "error", "kind": "file_size", "limit": limits["file_size_mb"]}
    if "heap out of memory" in stderr or "MemoryError" in stderr:
        return {"status": "error", "kind": "memory", "limit": limits["memory_mb"]}
    result = _result(bytearray(output))
    if result is not None:
        return _finish_result(result, limits)
    if os.WIFSIGNALED(status):
        how = f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    else:
        how = f"exit code {os.WEXITSTATUS(status)}"
    return {"status": "error", "kind": "crashed", "detail": how, "stderr": stderr[-1000:]}


_LIMIT_OF = {"memory": "memory_mb", "open_files": "open_files"}


def _finish_result(result: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    setting = _LIMIT_OF.get(str(result.get("kind")))
    if setting is not None:
        result["limit"] = limits[setting]
    return result


def cleanup(child: Child) -> None:
    if child.pid > 0:
        kill(child.pid)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child.pid, 0)
    for fd in (child.out_r, child.err_r, child.job_w):
        if fd is not None and fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def unlock(function: Any, failed: str, _exc: Any) -> None:
        # A job may leave a directory without permissions; we own it, so open it up.
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), 0o700)
            os.chmod(failed, 0o700)
            function(failed)

    shutil.rmtree(child.job_dir, onerror=unlock)


def run_one(
    sock: socket.socket, config: dict[str, Any], warm: Child, job: dict[str, Any]
) -> tuple[dict[str, Any], bool, bool]:
    """(answer, runtime gone, warm process used)."""
    if job.get("language") == "javascript":
        child, used_warm = fork_node(sock, config, job), False
    else:
        child, used_warm = warm, True
        if not hand_over(child, job):
            return {"status": "error", "kind": "crashed", "detail": "job process gone"}, False, True
    try:
        answer, gone = supervise(sock, child, job, config["limits"])
    finally:
        if not used_warm:
            cleanup(child)
    return answer, gone, used_warm


def serve(sock: socket.socket, config: dict[str, Any]) -> int:
    max_frame = int(config["max_frame_bytes"])
    # Two forked ahead: the one after next confines itself while the next job runs,
    # so back-to-back jobs never wait for a fork.
    warm = deque(fork_warm(sock, config) for _ in range(WARM_AHEAD))
    dying: list[Child] = []  # killed job processes, reaped while idle
    try:
        while True:
            _tidy(sock, dying)
            try:
                job = framing.receive(sock, max_frame)
            except framing.FrameError:
                return 0  # the runtime went away (or spoke nonsense): stop
            if not isinstance(job, dict) or "language" not in job or "cancel" in job:
                continue  # a cancel that arrived after its job ended
            answer, gone, used_warm = run_one(sock, config, warm[0], job)
            answer["id"] = job.get("id")
            try:
                framing.send(sock, answer)
            except OSError:
                return 0
            if gone:
                return 0
            if used_warm:
                used = warm.popleft()
                kill(used.pid)
                dying.append(used)
                warm.append(fork_warm(sock, config))
    finally:
        for child in [*warm, *dying]:
            cleanup(child)


def _tidy(sock: socket.socket, dying: list[Child]) -> None:
    """Reap finished job processes and remove their directories while no job waits
    (a dying process takes milliseconds to tear down: off the next job's path)."""
    while dying:
        if len(dying) <= 4 and select.select([sock], [], [], 0)[0]:
            return
        cleanup(dying.pop(0))


def main() -> int:
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.setblocking(True)
    try:
        config = framing.receive(sock, 1 << 20)
    except framing.FrameError:
        return 2
    preload(config)
    report = confine(config)
    framing.send(sock, {"ready": True, "pid": os.getpid(), "isolation": report})
    return serve(sock, config)


if __name__ == "__main__":
    sys.exit(main())
