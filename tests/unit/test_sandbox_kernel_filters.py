"""The worker's kernel-level guards, each on its own: the seccomp filters and
Landlock, installed in a forked child of the test with nothing else around
them (no audit hooks, no other layer), so each one is shown to hold alone."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from firstgate.sandbox.worker import landlock, seccomp

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux only")
SETRLIMIT = {"x86_64": 160, "aarch64": 164}.get(os.uname().machine, -1)


def in_child(body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run `body` in a forked child and return what it reports."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            report = body()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            report = {"error": repr(exc)}
        os.write(write_end, json.dumps(report).encode())
        os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"child ended by signal {os.WTERMSIG(status)}"
    return json.loads(data)


def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def result(value: int) -> tuple[int, int]:
    return value, ctypes.get_errno() if value < 0 else 0


@pytest.fixture
def bystander() -> Any:
    process = subprocess.Popen(["sleep", "30"])
    yield process
    process.kill()
    process.wait()


def test_base_filter_refuses_sockets_io_uring_and_ptrace() -> None:
    def body() -> dict[str, Any]:
        seccomp.install(seccomp.base_rules(network=False))
        c = libc()
        c.syscall.restype = ctypes.c_long
        return {
            "socket": result(c.socket(2, 1, 0)),
            "unix": result(c.socket(1, 1, 0)),
            "socketpair": result(c.socketpair(1, 1, 0, (ctypes.c_int * 2)())),  # reaches nothing
            "io_uring": result(c.syscall(425, 8, (ctypes.c_char * 128)())),
            "ptrace": result(c.ptrace(16, os.getppid(), 0, 0)),  # PTRACE_ATTACH
            "pipe": result(c.pipe((ctypes.c_int * 2)())),  # unrelated calls still work
        }

    report = in_child(body)
    for name in ("socket", "unix", "io_uring", "ptrace"):
        assert report[name] == [-1, errno.EPERM], (name, report)
    assert report["socketpair"][0] == 0
    assert report["pipe"][0] == 0


def test_base_filter_with_network_allows_sockets() -> None:
    def body() -> dict[str, Any]:
        seccomp.install(seccomp.base_rules(network=True))
        return {"socket": result(libc().socket(2, 1, 0))}

    assert in_child(body)["socket"][0] >= 0


def test_job_filter_refuses_processes_signals_and_limits(
    bystander: subprocess.Popen[bytes],
) -> None:
    def body() -> dict[str, Any]:
        seccomp.install(seccomp.job_rules(os.getpid(), allow_exec=False))
        c = libc()
        import resource
        import threading

        threads_work = []
        thread = threading.Thread(target=lambda: threads_work.append(True))
        thread.start()
        thread.join()
        try:
            cpu = resource.getrlimit(resource.RLIMIT_CPU)[0]
        except OSError:
            cpu = "refused"
        return {
            "fork": result(c.fork()),
            "kill_other": result(c.kill(bystander.pid, signal.SIGTERM)),
            "kill_self": result(c.kill(os.getpid(), 0)),
            # glibc's setrlimit() is the prlimit64 system call; the old call directly:
            "setrlimit": result(c.setrlimit(0, (ctypes.c_ulong * 2)(1 << 40, 1 << 40))),
            "setrlimit_call": result(
                c.syscall(SETRLIMIT, 0, (ctypes.c_ulong * 2)(1 << 40, 1 << 40))
            ),
            "getrlimit": cpu,
            "execve": result(c.execve(b"/bin/true", None, None)),
            "threads": threads_work,
        }

    report = in_child(body)
    assert report["fork"] == [-1, errno.EPERM]
    assert report["kill_other"] == [-1, errno.EPERM]
    assert report["kill_self"] == [0, 0]
    assert report["setrlimit"] == [-1, errno.EPERM]
    assert report["setrlimit_call"] == [-1, errno.EPERM]
    assert report["getrlimit"] != "refused"  # reading a limit is fine
    assert report["execve"] == [-1, errno.EPERM]
    assert report["threads"] == [True]
    assert bystander.poll() is None, "the other process was signalled"


def test_job_filter_for_node_allows_exec() -> None:
    def body() -> dict[str, Any]:
        seccomp.install(seccomp.job_rules(os.getpid(), allow_exec=True))
        os.execv("/bin/true", ["true"])
        return {}

    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0  # /bin/true ran


@pytest.mark.skipif(landlock.abi_version() < 1, reason="no Landlock on this kernel")
def test_landlock_confines_files_and_proc(bystander: subprocess.Popen[bytes]) -> None:
    mine = tempfile.mkdtemp()
    outside = os.path.abspath(__file__)

    def body() -> dict[str, Any]:
        seccomp.no_new_privs()
        landlock.restrict(
            [sys.base_prefix, sys.prefix, "/usr", "/lib", "/lib64"], [mine], network=False
        )
        found: dict[str, Any] = {}
        for name, path in (
            ("outside", outside),
            ("proc_environ", f"/proc/{os.getppid()}/environ"),
            ("proc_self", "/proc/self/status"),
        ):
            try:
                open(path, "rb").close()
                found[name] = "read"
            except OSError as exc:
                found[name] = errno.errorcode[exc.errno]
        with open(os.path.join(mine, "ok.txt"), "w") as fh:
            fh.write("x")
        try:
            open("/tmp/firstgate-landlock-escape.txt", "w").close()
            found["write_tmp"] = "written"
        except OSError as exc:
            found["write_tmp"] = errno.errorcode[exc.errno]
        if landlock.abi_version() >= 6:
            found["signal"] = result(libc().kill(bystander.pid, signal.SIGTERM))
        return found

    report = in_child(body)
    assert report["outside"] == "EACCES"
    assert report["proc_environ"] == "EACCES"
    assert report["proc_self"] == "EACCES"
    assert report["write_tmp"] == "EACCES"
    assert os.path.exists(os.path.join(mine, "ok.txt"))
    if "signal" in report:
        assert report["signal"] == [-1, errno.EPERM]
        assert bystander.poll() is None


FCNTL = {"x86_64": 72, "aarch64": 25}.get(os.uname().machine, -1)
IOCTL = {"x86_64": 16, "aarch64": 29}.get(os.uname().machine, -1)


def test_job_filter_refuses_descriptor_owners_and_async_signals(
    bystander: subprocess.Popen[bytes],
) -> None:
    def body() -> dict[str, Any]:
        reader, _writer = os.pipe()
        pair = (ctypes.c_int * 2)()
        assert libc().socketpair(1, 1, 0, pair) == 0
        pid = ctypes.c_int(bystander.pid)
        seccomp.install(seccomp.job_rules(os.getpid(), allow_exec=False))
        c = libc()
        c.syscall.restype = ctypes.c_long
        c.syscall.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_ulong, ctypes.c_void_p]

        def fcntl(fd: int, cmd: int, arg: int = 0) -> tuple[int, int]:
            return result(c.syscall(FCNTL, fd, cmd, arg))

        def ioctl(fd: int, cmd: int) -> tuple[int, int]:
            return result(c.syscall(IOCTL, fd, cmd, ctypes.addressof(pid)))

        return {
            "F_SETOWN": fcntl(reader, seccomp.F_SETOWN, bystander.pid),
            # the kernel reads the command as 32 bits: high bits do not get past
            "F_SETOWN_high_bits": fcntl(reader, (1 << 32) | seccomp.F_SETOWN, bystander.pid),
            "F_SETOWN_EX": fcntl(reader, seccomp.F_SETOWN_EX, ctypes.addressof(pid)),
            "F_SETSIG": fcntl(reader, seccomp.F_SETSIG, signal.SIGKILL),
            "FIOSETOWN": ioctl(pair[0], seccomp.FIOSETOWN),
            "SIOCSPGRP": ioctl(pair[0], seccomp.SIOCSPGRP),
            "FIOASYNC": ioctl(pair[0], seccomp.FIOASYNC),
            "F_GETOWN": fcntl(reader, 9),  # reading the owner is harmless
            "F_GETFL": fcntl(reader, 3),
            "FIONREAD": ioctl(pair[0], 0x541B),
        }

    report = in_child(body)
    refused = ("F_SETOWN", "F_SETOWN_high_bits", "F_SETOWN_EX", "F_SETSIG")
    for name in (*refused, "FIOSETOWN", "SIOCSPGRP", "FIOASYNC"):
        assert report[name] == [-1, errno.EPERM], (name, report)
    assert report["F_GETOWN"] == [0, 0]
    assert report["F_GETFL"][0] >= 0
    assert report["FIONREAD"] == [0, 0]
    assert bystander.poll() is None
