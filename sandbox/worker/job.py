"""What runs inside one job's process (a fork of the worker): confinement of
the process, then the user's Python code, a Jinja2 template, or an exec of
Node.js with the JavaScript runner.

Stdlib only (plus Jinja2 for template jobs). The process talks to the runtime
directly over CHANNEL_FD, a socket the worker hands the runtime: one
length-prefixed JSON job in, one length-prefixed JSON result out,
{"status": "ok", "result": {...}} or {"status": "error", "kind": ..., ...}.
Its standard error goes to a file in its directory; the worker reads the tail
when the runtime asks how a process that sent no result ended.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import errno
import json
import os
import resource
import signal
import struct
import sys
import tempfile
import traceback
from typing import Any

import landlock
import seccomp

CHANNEL_FD = 3
STDERR_FILE = "stderr"
_PR_SET_PDEATHSIG = 1
_LENGTH = struct.Struct(">I")

with open(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner.js"), encoding="utf-8"
) as _fh:
    NODE_RUNNER = _fh.read()

# Python audit events that mean "tried to leave the sandbox": turned into a clear
# error for the user. The kernel filters are what actually stop the call.
NETWORK_EVENTS = frozenset(
    {"socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
     "socket.gethostbyname", "socket.gethostbyaddr", "socket.sendto", "socket.sendmsg"}
)  # fmt: skip
PROCESS_EVENTS = frozenset(
    {"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
     "subprocess.Popen", "pty.spawn"}
)  # fmt: skip


class SandboxViolation(PermissionError):
    """Raised inside user code when it tries something the sandbox forbids."""


# ---- the process


def prepare(config: dict[str, Any], job_dir: str, channel: int, *, for_node: bool) -> None:
    """Descriptors, directory, environment and limits of a fresh job process.

    The channel becomes CHANNEL_FD; every other inherited descriptor (the
    worker's socket to the runtime above all) is closed.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the worker died: so do we
    null = os.open(os.devnull, os.O_RDWR)
    stderr = os.open(os.path.join(job_dir, STDERR_FILE), os.O_WRONLY | os.O_CREAT, 0o600)
    moved = os.dup(channel)  # may not land on 0-2 (they are open): never clobbered below
    for target, source in ((0, null), (1, null), (2, stderr), (CHANNEL_FD, moved)):
        os.dup2(source, target)
    os.closerange(CHANNEL_FD + 1, 1 << 16)
    confine_files(config, job_dir)
    os.chdir(job_dir)
    # The worker's environment is already the scrubbed one it was started with.
    os.environ.update({"HOME": job_dir, "TMPDIR": job_dir})
    tempfile.tempdir = job_dir
    for sig in (signal.SIGXCPU, signal.SIGXFSZ, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    set_limits(config["limits"], for_node=for_node)
    seccomp.install(seccomp.job_rules(os.getpid(), allow_exec=for_node))


def confine_files(config: dict[str, Any], job_dir: str) -> None:
    """A Landlock layer of the job's own over the worker's: the same reads, writes
    only in its own directory. The worker's layer allows its whole directory, so
    without this a job could plant files in the directories of the processes
    forked ahead for later jobs, or leave files that outlive it."""
    if not config.get("job_landlock"):
        return  # the worker runs without Landlock (require_landlock: false)
    landlock.restrict(
        config["read_only"],
        [job_dir, *config["devices"]],
        network=bool(config["network"]),
        max_abi=config.get("landlock_max_abi"),
    )


def set_limits(limits: dict[str, Any], *, for_node: bool) -> None:
    mib = 1024 * 1024
    cpu = max(1, -int(-float(limits["cpu_s"]) // 1))  # whole seconds, rounded up
    memory = int(limits["memory_mb"]) * mib
    pairs = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_DATA, (memory, memory)),
        (resource.RLIMIT_FSIZE, (int(limits["file_size_mb"]) * mib,) * 2),
        (resource.RLIMIT_NOFILE, (int(limits["open_files"]),) * 2),
        (resource.RLIMIT_NPROC, (int(limits["processes"]),) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    if not for_node:  # V8 reserves gigabytes of address space it never touches
        pairs.append((resource.RLIMIT_AS, (memory, memory)))
    for which, value in pairs:
        resource.setrlimit(which, value)


def read_job(fd: int) -> dict[str, Any]:
    (size,) = _LENGTH.unpack(_read_exact(fd, _LENGTH.size))
    return json.loads(_read_exact(fd, size))


def _read_exact(fd: int, size: int) -> bytes:
    parts: list[bytes] = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("the worker closed the job pipe")
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def write_result(result: dict[str, Any]) -> None:
    try:
        data = json.dumps(result, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        frame = {"status": "error", "kind": "not_json", "detail": str(exc)[:500]}
        data = json.dumps(frame).encode("utf-8")
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        view = view[os.write(CHANNEL_FD, view) :]
    os.close(CHANNEL_FD)


# ---- Python and Jinja2


def run_python(job: dict[str, Any], network: bool) -> dict[str, Any]:
    violations: list[str] = []
    me = os.getpid()

    def audit(event: str, args: tuple[Any, ...]) -> None:
        kind = None
        if event in PROCESS_EVENTS:
            kind = "process"
        elif event in NETWORK_EVENTS and not network:
            kind = "network"
        elif event in ("os.kill", "os.killpg") and args and args[0] not in (me, 0):
            kind = "signal"
        if kind is not None:
            violations.append(kind)
            raise SandboxViolation(errno.EPERM, f"{kind} access is not allowed in the sandbox")

    sys.addaudithook(audit)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(job["code"], "<code>", "exec"), namespace)
        main = namespace.get("main")
        if not callable(main):
            return {"status": "error", "kind": "no_main"}
        result = main(**job["inputs"])
        if not isinstance(result, dict):
            return {"status": "error", "kind": "not_dict", "type": type(result).__name__}
        return {"status": "ok", "result": result}
    except MemoryError:
        namespace.clear()
        return {"status": "error", "kind": "memory"}
    except BaseException as exc:  # noqa: BLE001 - the user's error, reported
        namespace.clear()
        if violations:
            return {"status": "error", "kind": "violation", "operation": violations[-1]}
        if _has_errno(exc, errno.EMFILE):
            return {"status": "error", "kind": "open_files"}
        return {"status": "error", "kind": "exception", **describe(exc)}


def _has_errno(exc: BaseException | None, code: int) -> bool:
    for _ in range(10):
        if exc is None:
            return False
        if isinstance(exc, OSError) and exc.errno == code:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def describe(exc: BaseException) -> dict[str, Any]:
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename in ("<code>", "<template>"):
            line = frame.lineno
    if isinstance(exc, SyntaxError) and exc.filename in ("<code>", "<unknown>", None):
        line = exc.lineno
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "line": line}


def run_jinja(job: dict[str, Any]) -> dict[str, Any]:
    from jinja2.sandbox import SandboxedEnvironment

    limit = int(job.get("max_chars") or 0)
    try:
        env = SandboxedEnvironment(**job.get("options", {}))
        parts: list[str] = []
        size = 0
        for piece in env.from_string(job["code"]).generate(**job["inputs"]):
            size += len(piece)
            if limit and size > limit:
                return {"status": "error", "kind": "text_too_long", "size": size, "limit": limit}
            parts.append(piece)
        return {"status": "ok", "result": {"result": "".join(parts)}}
    except MemoryError:
        return {"status": "error", "kind": "memory"}
    except BaseException as exc:  # noqa: BLE001 - the template's error, reported
        return {"status": "error", "kind": "exception", **describe(exc)}


def serve(config: dict[str, Any], job_dir: str, channel: int, *, for_node: bool) -> None:
    """A job process forked ahead: confined before its job exists, then it waits
    for the job on its channel (Node.js reads the job itself, after the exec)."""
    code = 70
    try:
        if for_node:
            # Written before the limits apply: the file-size limit is for the user's code.
            with open(os.path.join(job_dir, "runner.js"), "w", encoding="utf-8") as fh:
                fh.write(NODE_RUNNER)
        prepare(config, job_dir, channel, for_node=for_node)
        if for_node:
            exec_node(config)
        rehearse()
        job = read_job(CHANNEL_FD)
        if job.get("language") == "jinja2":
            result = run_jinja(job)
        else:
            result = run_python(job, bool(config["network"]))
        write_result(result)
        code = 0
    except BaseException:  # noqa: BLE001 - nothing may escape into the worker's loop
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(code)


def rehearse() -> None:
    """Walk the path a job takes once before the job comes: a fresh fork copies
    each page it first writes to (reference counts), and those copies are better
    made while waiting than while the runtime waits."""
    namespace: dict[str, Any] = {"__name__": "__rehearsal__", "__builtins__": builtins}
    exec(compile("def main(a):\n    return {'b': [a, str(a)]}\n", "<rehearsal>", "exec"), namespace)
    json.dumps({"status": "ok", "result": namespace["main"](**json.loads('{"a": 1}'))})


def exec_node(config: dict[str, Any]) -> None:
    """Become Node.js running the JavaScript runner (filters and limits carry over)."""
    node = config["node"]
    heap = max(16, int(config["limits"]["memory_mb"]) // 2)
    env = dict(os.environ) | {"FIRSTGATE_NETWORK": str(int(bool(config["network"])))}
    os.execve(node, [node, f"--max-old-space-size={heap}", "runner.js"], env)
