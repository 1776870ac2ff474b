"""A code node cannot get the kernel to signal another process for it.

A descriptor with an owner and O_ASYNC makes the kernel send the owner a
signal (SIGIO, or the one F_SETSIG names) when data arrives: any pid, and as
root any process. The job's seccomp filter refuses every way to name an owner
or a signal (`fcntl` F_SETOWN, F_SETOWN_EX, F_SETSIG; `ioctl` FIOSETOWN,
SIOCSPGRP, FIOASYNC). Landlock's signal scope (Linux 6.12, ABI 6) also stops
the delivery, so each trick runs twice: on this kernel as it is, and with the
sandbox's Landlock capped below ABI 6, as on Ubuntu 24.04 or Debian 12, where
the filter is all there is.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest
from firstgate.sandbox.errors import CodeExecutionError
from firstgate.sandbox.process_pool import ProcessSandbox
from firstgate.sandbox.worker import landlock

from tests.integration.sandbox_support import HAS_NODE, small_sandbox

# The last ABI without signal scoping (Linux 6.7 to 6.11).
BEFORE_SCOPES = 5

# Each trick names an owner (the bystander's pid), maybe a signal, turns on
# O_ASYNC, then writes to the other end. Every step runs even when one before it
# failed, so each refused command shows in the report on its own.
TRICKS = r"""
import ctypes, errno, fcntl, os, signal, struct

def socketpair():
    # The raw call, below the audit hooks, as hostile code would make it.
    libc = ctypes.CDLL(None, use_errno=True)
    pair = (ctypes.c_int * 2)()
    if libc.socketpair(1, 1, 0, pair) != 0:
        raise OSError(ctypes.get_errno(), 'socketpair')
    return pair[0], pair[1]

def set_async(fd):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)

STEPS = {
    'F_SETOWN': ('pipe', [('owner', lambda fd, pid: fcntl.fcntl(fd, 8, pid)),
                          ('async', lambda fd, pid: set_async(fd))]),
    'F_SETOWN_EX': ('pipe', [('owner', lambda fd, pid: fcntl.fcntl(fd, 15, struct.pack('ii', 1, pid))),
                             ('async', lambda fd, pid: set_async(fd))]),
    'F_SETSIG': ('pipe', [('owner', lambda fd, pid: fcntl.fcntl(fd, 8, pid)),
                          ('signal', lambda fd, pid: fcntl.fcntl(fd, 10, int(signal.SIGKILL))),
                          ('async', lambda fd, pid: set_async(fd))]),
    'FIOSETOWN': ('socketpair', [('owner', lambda fd, pid: fcntl.ioctl(fd, 0x8901, struct.pack('i', pid))),
                                 ('async', lambda fd, pid: set_async(fd))]),
    'SIOCSPGRP': ('socketpair', [('owner', lambda fd, pid: fcntl.ioctl(fd, 0x8902, struct.pack('i', pid))),
                                 ('async', lambda fd, pid: set_async(fd))]),
    'FIOASYNC': ('socketpair', [('owner', lambda fd, pid: fcntl.ioctl(fd, 0x8901, struct.pack('i', pid))),
                                ('async', lambda fd, pid: fcntl.ioctl(fd, 0x5452, struct.pack('i', 1)))]),
}

def main(trick: str, pid: int) -> dict:
    kind, steps = STEPS[trick]
    reader, writer = os.pipe() if kind == 'pipe' else socketpair()
    report = {}
    for name, step in steps:
        try:
            step(reader, pid)
            report[name] = 'ok'
        except OSError as exc:
            report[name] = errno.errorcode.get(exc.errno, str(exc.errno))
    os.write(writer, b'x')  # data for the reader: the kernel signals its owner now
    return report
"""

# The command each trick is about, and the step that uses it.
REFUSED_STEP = {
    "F_SETOWN": "owner",
    "F_SETOWN_EX": "owner",
    "F_SETSIG": "signal",
    "FIOSETOWN": "owner",
    "SIOCSPGRP": "owner",
    "FIOASYNC": "async",
}

KERNELS = [
    pytest.param(None, id="this-kernel"),
    pytest.param(BEFORE_SCOPES, id="landlock-abi-5"),
]


@pytest.fixture(scope="module", params=KERNELS)
def pool(request: pytest.FixtureRequest) -> Iterator[ProcessSandbox]:
    with small_sandbox(workers=1, landlock_max_abi=request.param) as started:
        yield started


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "30"])
    yield process
    process.kill()
    process.wait()


def alive_after_a_moment(process: subprocess.Popen[bytes]) -> bool:
    # SIGIO is queued by the write itself; a moment covers the scheduler.
    time.sleep(0.2)
    return process.poll() is None


def test_the_cap_emulates_a_kernel_without_signal_scoping(pool: ProcessSandbox) -> None:
    report = pool.isolation["landlock"]
    if pool.config.landlock_max_abi is None:
        assert report["abi"] == landlock.abi_version()
        assert report["scoped"] == int(report["abi"] >= 6)
    else:
        assert (report["abi"], report["scoped"]) == (BEFORE_SCOPES, 0)


@pytest.mark.parametrize("trick", sorted(REFUSED_STEP))
def test_no_descriptor_owner_signals_another_process(
    pool: ProcessSandbox, bystander: subprocess.Popen[bytes], trick: str
) -> None:
    report = pool.execute("python3", TRICKS, {"trick": trick, "pid": bystander.pid})
    assert alive_after_a_moment(bystander), f"{trick} signalled the bystander: {report}"
    assert report[REFUSED_STEP[trick]] == "EPERM", report


def test_f_setown_does_not_tell_which_pids_exist(
    pool: ProcessSandbox, bystander: subprocess.Popen[bytes]
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names no process now
    answers = {
        name: pool.execute("python3", TRICKS, {"trick": "F_SETOWN", "pid": pid})["owner"]
        for name, pid in (("live", bystander.pid), ("gone", gone.pid))
    }
    assert answers == {"live": "EPERM", "gone": "EPERM"}


def test_other_fcntl_and_ioctl_commands_still_work(pool: ProcessSandbox) -> None:
    code = (
        "import fcntl, os, struct, termios\n"
        "def main() -> dict:\n"
        "    reader, writer = os.pipe()\n"
        "    os.set_blocking(reader, False)\n"
        "    os.write(writer, b'abc')\n"
        "    ready = struct.unpack('i', fcntl.ioctl(reader, termios.FIONREAD, b'\\0' * 4))[0]\n"
        "    return {'nonblocking': not os.get_blocking(reader), 'ready': ready,\n"
        "            'owner': fcntl.fcntl(reader, fcntl.F_GETOWN)}\n"
    )
    assert pool.execute("python3", code, {}) == {"nonblocking": True, "ready": 3, "owner": 0}


# JavaScript has no fcntl or ioctl of its own, but Node.js loads native code:
# process.dlopen runs the constructors of any shared object the job can write.
NATIVE_OWNER = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void take_ownership(void) {
    int pid = 0, fds[2];
    FILE *in = fopen("pid.txt", "r");
    if (!in || fscanf(in, "%d", &pid) != 1) return;
    fclose(in);
    if (pipe(fds) != 0) return;
    int owner = fcntl(fds[0], F_SETOWN, pid);
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_ASYNC);
    (void)!write(fds[1], "x", 1);
    FILE *out = fopen("owner.txt", "w");
    if (out) { fprintf(out, "%d", owner); fclose(out); }
}
"""

LOAD_NATIVE = """
const fs = require('fs');
function main({library, pid}) {
  fs.writeFileSync('pid.txt', String(pid));
  fs.writeFileSync('owner.node', Buffer.from(library, 'base64'));
  try { process.dlopen({exports: {}}, fs.realpathSync('owner.node')); } catch (e) {}
  return {owner: fs.existsSync('owner.txt') ? fs.readFileSync('owner.txt', 'utf8') : null};
}
"""


@pytest.fixture(scope="module")
def native_library() -> str:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("needs a C compiler to build the native library")
    with tempfile.TemporaryDirectory() as folder:
        source, library = os.path.join(folder, "owner.c"), os.path.join(folder, "owner.node")
        with open(source, "w", encoding="utf-8") as fh:
            fh.write(NATIVE_OWNER)
        subprocess.run([compiler, "-shared", "-fPIC", "-o", library, source], check=True)
        with open(library, "rb") as fh:
            return base64.b64encode(fh.read()).decode("ascii")


@pytest.mark.skipif(not HAS_NODE, reason="Node.js is not installed")
def test_javascript_loading_native_code_cannot_signal_either(
    pool: ProcessSandbox, bystander: subprocess.Popen[bytes], native_library: str
) -> None:
    try:
        result = pool.execute(
            "javascript", LOAD_NATIVE, {"library": native_library, "pid": bystander.pid}
        )
    except CodeExecutionError as exc:  # a crash of the job would be a result too
        pytest.fail(f"the job did not finish: {exc}")
    assert result == {"owner": "-1"}  # the constructor ran; F_SETOWN was refused
    assert alive_after_a_moment(bystander)
