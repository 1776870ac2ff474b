"""The sandbox worker: a pre-started process that forks every job a fresh,
confined process of its own and hands it to the runtime.

Stdlib only (plus Jinja2 for template jobs when the interpreter has it). The
runtime starts it as `python -I zygote.py FD` with a scrubbed environment in a
temporary directory of its own; FD is its end of a socket pair to the runtime.

1. The first frame is the configuration. The worker imports what jobs will
   need, then confines itself for good: capabilities dropped (when started as
   root), no_new_privs, Landlock (file-system allow-list) and the base seccomp
   filter (no sockets, no io_uring, no ptrace, ...). It answers with a `ready`
   frame that reports which layers are in force.
2. It keeps WARM_AHEAD job processes forked ahead. Each gets a directory and a
   socket pair of its own, sets its resource limits, installs the job seccomp
   filter (no new processes, signals only to itself) and waits for its job on
   its end of the pair. The worker hands the other end, and a pidfd, to the
   runtime (an announcement with SCM_RIGHTS): from there the runtime sends the
   job and reads the result itself, holding the deadline and the size cap, and
   ends the process through the pidfd when one is passed or on a cancel.
3. The runtime asks the worker three things: `release` (done with a process:
   it is killed, reaped and its directory removed, while no request waits),
   `status` (how a process that closed its channel without a result ended: by
   signal, limit or crash) and `spawn` (a Node.js process, forked on request).

No job ever runs in the worker itself, and no process runs two jobs, so no
state of one job can reach the next.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import os
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import traceback
from dataclasses import dataclass
from typing import Any

# Started with -I, so this directory is not on sys.path: the worker's own modules are.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import framing  # noqa: E402
import job as job_process  # noqa: E402
import landlock  # noqa: E402
import seccomp  # noqa: E402

STDERR_TAIL = 4096
WARM_AHEAD = 3
# How long a job process that closed its channel may take to exit before it is killed.
GRACE_S = 2.0
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
            config["read_only"],
            config["writable"],
            network=config["network"],
            max_abi=config.get("landlock_max_abi"),
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
    pidfd: int
    node: bool
    answer: dict[str, Any] | None = None  # how it ended, once asked and reaped


def fork_job_process(sock: socket.socket, config: dict[str, Any], *, node: bool) -> None:
    """Fork a confined job process and hand the runtime its channel and a pidfd.

    The announcement is `{"warm": pid}` (Python and Jinja2) or `{"node": pid}`,
    sent with two descriptors: the runtime's end of the channel, and a pidfd
    the runtime signals to end the process (no pid can be reused under it).
    """
    job_dir = tempfile.mkdtemp(prefix="job-", dir=config["base_dir"])
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        sock.close()
        ours.close()
        job_process.serve(config, job_dir, theirs.fileno(), for_node=node)  # never returns
    theirs.close()
    child = Child(pid, job_dir, os.pidfd_open(pid), node)
    CHILDREN[pid] = child
    try:
        frame = framing.encode({"node" if node else "warm": pid})
        socket.send_fds(sock, [frame], [ours.fileno(), child.pidfd])
    finally:
        ours.close()


# Announced job processes the runtime has not released yet, by pid.
CHILDREN: dict[int, Child] = {}


def kill(pid: int) -> None:
    if pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def ended(child: Child, limits: dict[str, Any]) -> dict[str, Any]:
    """How a job process that sent no result ended: waits for it (a little), reaps
    it, and classifies its exit by signal, resource use and standard error."""
    if child.answer is not None:
        return child.answer
    ready, _, _ = select.select([child.pidfd], [], [], GRACE_S)
    if not ready:
        kill(child.pid)
    _, status, usage = os.wait4(child.pid, 0)
    cpu = usage.ru_utime + usage.ru_stime
    child.answer = classify(status, _stderr_tail(child.job_dir), limits, cpu)
    return child.answer


def _stderr_tail(job_dir: str) -> str:
    try:
        with open(os.path.join(job_dir, job_process.STDERR_FILE), "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - STDERR_TAIL))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def classify(status: int, stderr: str, limits: dict[str, Any], cpu: float) -> dict[str, Any]:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= float(limits["cpu_s"])):
            return {"status": "error", "kind": "cpu", "limit": limits["cpu_s"]}
        if sig == signal.SIGXFSZ:
            return {"status": "error", "kind": "file_size", "limit": limits["file_size_mb"]}
    if "heap out of memory" in stderr or "MemoryError" in stderr:
        return {"status": "error", "kind": "memory", "limit": limits["memory_mb"]}
    if os.WIFSIGNALED(status):
        how = f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    else:
        how = f"exit code {os.WEXITSTATUS(status)}"
    return {"status": "error", "kind": "crashed", "detail": how, "stderr": stderr[-1000:]}


def cleanup(child: Child) -> None:
    if child.answer is None:
        kill(child.pid)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child.pid, 0)
    with contextlib.suppress(OSError):
        os.close(child.pidfd)

    def unlock(function: Any, failed: str, _exc: Any) -> None:
        # A job may leave a directory without permissions; we own it, so open it up.
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), 0o700)
            os.chmod(failed, 0o700)
            function(failed)

    shutil.rmtree(child.job_dir, onerror=unlock)


# ---- the loop


def serve(sock: socket.socket, config: dict[str, Any]) -> int:
    """Answer the runtime's requests: `release` a job process it is done with,
    `status` of one that sent no result, `spawn` a Node.js one. Between them,
    keep WARM_AHEAD Python processes forked ahead and reap released ones."""
    limits = config["limits"]
    dying: list[Child] = []
    try:
        while True:
            _idle_work(sock, config, dying)
            try:
                request = framing.receive(sock, 4096)
            except framing.FrameError:
                return 0  # the runtime went away (or spoke nonsense): stop
            if not isinstance(request, dict):
                continue
            if "release" in request:
                child = CHILDREN.pop(int(request["release"]), None)
                if child is not None:
                    if child.answer is None:  # not reaped: its pid is still its own
                        kill(child.pid)
                    dying.append(child)
            elif "status" in request:
                child = CHILDREN.get(int(request["status"]))
                answer = ended(child, limits) if child else {"status": "error", "kind": "crashed"}
                framing.send(sock, {"ended": request["status"], "answer": answer})
            elif request.get("spawn") == "node" and config.get("node"):
                fork_job_process(sock, config, node=True)
    except OSError:
        traceback.print_exc()  # into the worker's log; the runtime replaces the worker
        return 1
    finally:
        for child in [*CHILDREN.values(), *dying]:
            cleanup(child)


def _idle_work(sock: socket.socket, config: dict[str, Any], dying: list[Child]) -> None:
    """Fork Python job processes ahead (up to WARM_AHEAD unreleased ones) and reap
    released ones (a teardown takes milliseconds), one step at a time, until a
    request arrives; a backlog of more than a few is reaped regardless."""
    while True:
        warm = sum(1 for child in CHILDREN.values() if not child.node)
        if warm >= WARM_AHEAD and not dying:
            return
        if len(dying) <= 4 and select.select([sock], [], [], 0)[0]:
            return
        if warm < WARM_AHEAD:
            fork_job_process(sock, config, node=False)
        else:
            cleanup(dying.pop(0))


def main() -> int:
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.setblocking(True)
    try:
        config = framing.receive(sock, 1 << 20)
    except framing.FrameError:
        return 2
    preload(config)
    # Everything imported so far is shared with every job process: keep the
    # collector from touching (and so copying) it in each of them.
    gc.freeze()
    report = confine(config)
    framing.send(sock, {"ready": True, "pid": os.getpid(), "isolation": report})
    return serve(sock, config)


if __name__ == "__main__":
    sys.exit(main())
