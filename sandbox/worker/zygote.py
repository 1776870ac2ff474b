"""The sandbox worker: a pre-started process that forks every job a fresh,
confined process of its own and hands it to the runtime.

Stdlib only (plus Jinja2 for template jobs when the interpreter has it). The
runtime starts it as `python -I zygote.py FD ALIVE` with a scrubbed
environment in a temporary directory of its own; FD is its end of a socket
pair to the runtime, ALIVE the read end of a pipe only the runtime writes to.

1. The first frame is the configuration. The worker imports what jobs will
   need, then confines itself for good: capabilities dropped (when started as
   root), no_new_privs, Landlock (file-system allow-list) and the base seccomp
   filter (no sockets, no io_uring, no ptrace, ...). It answers with a `ready`
   frame that reports which layers are in force.
2. It keeps WARM_AHEAD job processes forked ahead. Each gets a directory and a
   socket pair of its own, adds a Landlock layer (writes in its own directory
   only), sets its resource limits, installs the job seccomp filter (no new
   processes, signals only to itself) and waits for its job on its end of the
   pair. The worker hands the other end, and a pidfd, to the
   runtime (an announcement with SCM_RIGHTS): from there the runtime sends the
   job and reads the result itself, holding the deadline and the size cap, and
   ends the process through the pidfd when one is passed or on a cancel.
3. The runtime asks the worker three things: `release` (done with a process:
   it is killed, reaped and its directory removed, while no request waits),
   `status` (how a process that closed its channel without a result ended: by
   signal, limit or crash) and `spawn` (a Node.js process, forked on request).
   While it waits for them, it holds the job directories to the disk budget
   (`disk_mb` for all of them together): past it, a job's process is killed.
4. Before it confines itself it forks a janitor, which waits until the runtime
   lets go (closes the other end of its pipe, in `stop` or by dying) and then
   removes the worker's directory: the worker itself may not (its Landlock
   layer allows writes beneath the directory only), and a runtime killed
   outright cannot. The worker waits for it before it exits.

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
import time
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
# How often the job directories are held to the disk budget while a job may run.
DISK_POLL_S = 0.1
# What each directory entry counts for at least: many empty files take disk too
# (inodes, directory blocks), and the count stops after budget / BLOCK entries.
BLOCK = 4096
_MIB = 1024 * 1024
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
    over_disk: bool = False  # killed for taking the worker past its disk budget


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
    if child.over_disk:
        child.answer = {"status": "error", "kind": "disk", "limit": limits["disk_mb"]}
        return child.answer
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
    remove_tree(child.job_dir)


def remove_tree(top: str) -> None:
    """Remove a dead job's directory, whatever modes the job left in it."""
    shutil.rmtree(top, ignore_errors=True)
    if os.path.lexists(top):
        open_up(top)
        shutil.rmtree(top, ignore_errors=True)


def open_up(top: str) -> None:
    """Give every directory under `top` its owner's rights back (a job may leave
    some it cannot list or write, mode 0o300 or 0). We own them all, and the job
    is dead, so nothing changes them under us; links are never followed."""
    with contextlib.suppress(OSError):
        os.chmod(top, 0o700)
    for parent, names, _files in os.walk(top):
        for name in names:
            path = os.path.join(parent, name)
            if not os.path.islink(path):  # os.walk lists links to directories too
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o700)


# ---- the disk budget


def disk_usage(top: str, stop_at: int) -> int:
    """Bytes the tree under `top` takes on disk, each entry counted as at least
    BLOCK; counting stops once past `stop_at`. A directory that cannot be listed
    counts as `stop_at`: a job may not hide files from the count (mode 0o300)."""
    total = 0
    pending = [top]
    while pending:
        try:
            entries = os.scandir(pending.pop())
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed by the job meanwhile
        except OSError:
            return stop_at
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                total += max(info.st_blocks * 512, BLOCK)
                if total >= stop_at:
                    return total
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
    return total


def hold_to_disk_budget(budget: int) -> None:
    """Kill the job processes that take the worker's directories past `budget`
    bytes together, largest first. Their files go when they are released."""
    live = [c for c in CHILDREN.values() if c.answer is None and not c.over_disk]
    usage = {child.pid: disk_usage(child.job_dir, budget + 1) for child in live}
    total = sum(usage.values())
    for child in sorted(live, key=lambda c: usage[c.pid], reverse=True):
        if total <= budget:
            return
        child.over_disk = True
        kill(child.pid)
        total -= usage[child.pid]


def wait_for_request(sock: socket.socket, limits: dict[str, Any]) -> None:
    """Return once the runtime has sent something; meanwhile hold the disk budget."""
    budget = int(limits["disk_mb"]) * _MIB
    while not select.select([sock], [], [], DISK_POLL_S)[0]:
        hold_to_disk_budget(budget)


# ---- the janitor


def start_janitor(base_dir: str, runtime_fd: int) -> int:
    """Fork the process that removes `base_dir` once the runtime is gone; its pid.

    It reads `runtime_fd`, a pipe whose other end only the runtime holds, until
    the end of file that the runtime's `stop` or its exit (of any kind) makes.
    Forked before the worker confines itself; in a session of its own, so that
    a kill of the worker's group is not its end; it runs nothing else and keeps
    nothing else open."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setsid()
            os.closerange(3, runtime_fd)
            os.closerange(runtime_fd + 1, 1 << 16)
            with contextlib.suppress(OSError):
                while os.read(runtime_fd, 1):
                    pass
            # The worker may still be making a job directory inside it when the
            # runtime goes (it has not seen its end yet): a removal that found the
            # tree growing under it is tried again until nothing is left.
            for _ in range(200):
                remove_tree(base_dir)
                if not os.path.lexists(base_dir):
                    break
                time.sleep(0.025)
        except BaseException:  # noqa: BLE001 - nothing may return into the worker's code
            code = 1
        finally:
            os._exit(code)
    os.close(runtime_fd)
    return pid


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
            wait_for_request(sock, limits)
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
    janitor = start_janitor(config["base_dir"], int(sys.argv[2]))
    try:
        preload(config)
        # Everything imported so far is shared with every job process: keep the
        # collector from touching (and so copying) it in each of them.
        gc.freeze()
        report = confine(config)
        config["job_landlock"] = bool(report["landlock"])  # each job adds a layer of its own
        ready = {"ready": True, "pid": os.getpid(), "janitor": janitor, "isolation": report}
        framing.send(sock, ready)
        return serve(sock, config)
    finally:
        sock.close()  # the runtime sees this worker gone, and lets go of the janitor
        with contextlib.suppress(ChildProcessError):
            os.waitpid(janitor, 0)  # reaped here, not left to whoever adopts orphans


if __name__ == "__main__":
    sys.exit(main())
