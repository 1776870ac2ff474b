"""Every limit of the default code executor, enforced on real processes.

Each hostile job fails with its own typed error, and the job after it (on the
same pool, usually the same worker) still runs: a limit takes down only the
job's own process.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
from firstgate.sandbox.errors import (
    CodeCancelledError,
    CodeExecutionError,
    CodeResourceLimitError,
    CodeRuntimeUnavailableError,
    CodeSandboxViolationError,
    CodeTimeoutError,
)
from firstgate.sandbox.process_pool import ProcessSandbox

from tests.integration.sandbox_support import CPU_BOUND, HAS_NODE, SMALL, small_sandbox

ADD = "def main(a: int) -> dict:\n    return {'b': a + 1}\n"


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessSandbox]:
    with small_sandbox() as started:
        yield started


def still_runs(pool: ProcessSandbox) -> None:
    assert pool.execute("python3", ADD, {"a": 41}) == {"b": 42}


def test_a_plain_job_runs_and_reports_its_isolation(pool: ProcessSandbox) -> None:
    still_runs(pool)
    isolation = pool.isolation
    assert isolation["seccomp"] is True
    assert isolation["landlock"], isolation
    if os.geteuid() == 0:
        assert isolation["capabilities_dropped"] is True


def test_infinite_loop_hits_the_cpu_limit() -> None:
    with small_sandbox(workers=1, limits=CPU_BOUND) as pool:
        with pytest.raises(CodeTimeoutError) as caught:
            pool.execute("python3", "def main():\n    while True:\n        pass\n", {})
        assert caught.value.message_key == "errors.code.cpuLimit"
        still_runs(pool)


def test_sleeping_job_hits_the_wall_clock_timeout(
    pool: ProcessSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from firstgate.sandbox.worker_process import WorkerProcess

    released: list[int] = []
    real_release = WorkerProcess._release

    def recording(self: WorkerProcess, channel: object) -> None:
        released.append(channel.pid)  # type: ignore[attr-defined]
        real_release(self, channel)  # type: ignore[arg-type]

    monkeypatch.setattr(WorkerProcess, "_release", recording)
    code = "import time\ndef main():\n    time.sleep(60)\n"
    workers = {w.pid for w in pool._workers}
    started = time.monotonic()
    with pytest.raises(CodeTimeoutError) as caught:
        pool.execute("python3", code, {})
    assert caught.value.message_key == "errors.code.timeout"
    assert time.monotonic() - started < 30  # the timeout, not the sleep, ended it
    # The job's process was ended; the worker itself is fine and stays.
    assert {w.pid for w in pool._workers} == workers
    still_runs(pool)
    for _ in range(100):
        try:
            os.kill(released[0], 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the timed-out job's process is still there")


def test_fork_bomb_cannot_start_a_single_process(pool: ProcessSandbox) -> None:
    code = "import os\ndef main():\n    while True:\n        os.fork()\n"
    with pytest.raises(CodeSandboxViolationError) as caught:
        pool.execute("python3", code, {})
    assert caught.value.message_key == "errors.code.violation.process"
    still_runs(pool)


def test_subprocess_is_refused(pool: ProcessSandbox) -> None:
    code = "import subprocess\ndef main():\n    subprocess.run(['true'])\n"
    with pytest.raises(CodeSandboxViolationError):
        pool.execute("python3", code, {})
    still_runs(pool)


def test_fork_below_the_audit_hooks_is_refused_by_the_kernel(pool: ProcessSandbox) -> None:
    # libc's fork() directly: no Python audit event, so only seccomp can stop it.
    code = (
        "import ctypes\n"
        "def main():\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    pid = libc.fork()\n"
        "    if pid == 0:\n"
        "        libc._exit(0)\n"
        "    return {'pid': pid, 'errno': ctypes.get_errno()}\n"
    )
    result = pool.execute("python3", code, {})
    assert result["pid"] == -1, "a child process was created"
    assert result["errno"] in (1, 38)  # EPERM (fork/clone) or ENOSYS (clone3)


def test_memory_hog_hits_the_memory_limit(pool: ProcessSandbox) -> None:
    # Stops by itself at 2 GB: enough to cross the limit, bounded if the limit is gone.
    code = "def main():\n    blocks = [bytearray(16 * 1024 * 1024) for _ in range(128)]\n    return {'n': len(blocks)}\n"
    with pytest.raises(CodeResourceLimitError) as caught:
        pool.execute("python3", code, {})
    assert caught.value.message_key == "errors.code.memoryLimit"
    assert caught.value.params["limit"] == SMALL.memory_mb
    still_runs(pool)


class _Listener:
    """A real TCP listener in this process that records whether anyone connected."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connected = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connected.set()
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[_Listener]:
    found = _Listener()
    yield found
    found.close()


def test_socket_connect_fails_with_a_network_error(
    pool: ProcessSandbox, listener: _Listener
) -> None:
    code = (
        "import socket\n"
        "def main(port: int):\n"
        "    socket.create_connection(('127.0.0.1', port), timeout=1)\n"
        "    return {}\n"
    )
    with pytest.raises(CodeSandboxViolationError) as caught:
        pool.execute("python3", code, {"port": listener.port})
    assert caught.value.message_key == "errors.code.violation.network"
    assert not listener.connected.wait(0.3)
    still_runs(pool)


def test_connect_below_the_audit_hooks_is_refused_by_the_kernel(
    pool: ProcessSandbox, listener: _Listener
) -> None:
    # socket(2) and connect(2) straight from libc: only the seccomp filter stands in the way.
    code = (
        "import ctypes, struct\n"
        "def main(port: int):\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    fd = libc.socket(2, 1, 0)\n"
        "    err = ctypes.get_errno()\n"
        "    if fd < 0:\n"
        "        return {'fd': fd, 'errno': err, 'connected': False}\n"
        "    addr = struct.pack('<HH4s8x', 2, ((port & 255) << 8) | (port >> 8), bytes([127, 0, 0, 1]))\n"
        "    rc = libc.connect(fd, addr, len(addr))\n"
        "    return {'fd': fd, 'errno': err, 'connected': rc == 0}\n"
    )
    result = pool.execute("python3", code, {"port": listener.port})
    assert result["connected"] is False
    assert result["fd"] == -1 and result["errno"] == 1  # EPERM from the filter
    assert not listener.connected.wait(0.3)


def test_network_can_be_turned_on(listener: _Listener) -> None:
    code = (
        "import socket\n"
        "def main(port: int):\n"
        "    socket.create_connection(('127.0.0.1', port), timeout=2).close()\n"
        "    return {'ok': True}\n"
    )
    with small_sandbox(workers=1, network=True) as networked:
        assert networked.execute("python3", code, {"port": listener.port}) == {"ok": True}
    assert listener.connected.wait(2)


def test_code_sees_none_of_the_runtimes_environment(
    pool: ProcessSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pool started before this variable existed; a fresh pool proves the
    # point for variables set before it starts, too.
    monkeypatch.setenv("FIRSTGATE_TEST_SECRET", "hunter2-secret-value")
    code = (
        "import os\n"
        "def main(runtime_pid: int):\n"
        "    found = {'env': dict(os.environ)}\n"
        "    for name in ('environ', 'mem', 'cmdline'):\n"
        "        try:\n"
        "            with open(f'/proc/{runtime_pid}/{name}', 'rb') as fh:\n"
        "                found[name] = fh.read(4096).decode('latin-1')\n"
        "        except OSError as exc:\n"
        "            found[name] = 'denied: ' + type(exc).__name__\n"
        "    return found\n"
    )
    with small_sandbox(workers=1) as fresh:
        result = fresh.execute("python3", code, {"runtime_pid": os.getpid()})
        (worker,) = list(fresh._workers)
        with open(f"/proc/{worker.pid}/environ", "rb") as fh:
            worker_environment = fh.read()
    assert b"hunter2" not in worker_environment
    assert "hunter2" not in repr(result)
    assert set(result["env"]) <= {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR"}
    for name in ("environ", "mem", "cmdline"):
        assert result[name].startswith("denied: "), result[name]


def test_reading_the_runtimes_environment_file_is_an_error(pool: ProcessSandbox) -> None:
    code = "def main(pid: int):\n    return {'env': open(f'/proc/{pid}/environ').read()}\n"
    with pytest.raises(CodeExecutionError) as caught:
        pool.execute("python3", code, {"pid": os.getpid()})
    assert caught.value.params["type"] == "PermissionError"
    still_runs(pool)


def test_files_outside_the_job_directory_are_out_of_reach(pool: ProcessSandbox) -> None:
    code = (
        "import os\n"
        "def main(paths: list) -> dict:\n"
        "    out = {}\n"
        "    for path in paths:\n"
        "        try:\n"
        "            open(path, 'rb').read(1)\n"
        "            out[path] = 'read'\n"
        "        except OSError as exc:\n"
        "            out[path] = type(exc).__name__\n"
        "    with open('mine.txt', 'w') as fh:\n"
        "        fh.write('ok')\n"
        "    out['own'] = open('mine.txt').read()\n"
        "    return out\n"
    )
    here = os.path.abspath(__file__)
    result = pool.execute("python3", code, {"paths": [here, "/etc/shadow", "/etc/passwd"]})
    assert result == {
        here: "PermissionError",
        "/etc/shadow": "PermissionError",
        "/etc/passwd": "PermissionError",
        "own": "ok",
    }


def test_huge_file_hits_the_file_size_limit(pool: ProcessSandbox) -> None:
    code = (
        "def main():\n"
        "    with open('big.bin', 'wb') as fh:\n"
        "        while True:\n"
        "            fh.write(b'x' * 1024 * 1024)\n"
    )
    with pytest.raises(CodeResourceLimitError) as caught:
        pool.execute("python3", code, {})
    assert caught.value.message_key == "errors.code.fileSizeLimit"
    still_runs(pool)


def test_too_many_open_files_hits_the_limit(pool: ProcessSandbox) -> None:
    code = "def main():\n    held = [open('f%d' % i, 'w') for i in range(1000)]\n"
    with pytest.raises(CodeResourceLimitError) as caught:
        pool.execute("python3", code, {})
    assert caught.value.message_key == "errors.code.openFilesLimit"
    still_runs(pool)


def test_an_oversized_result_hits_the_output_cap(pool: ProcessSandbox) -> None:
    code = "def main():\n    return {'s': 'x' * (1024 * 1024)}\n"
    with pytest.raises(CodeResourceLimitError) as caught:
        pool.execute("python3", code, {})
    assert caught.value.message_key == "errors.code.outputLimit"
    still_runs(pool)


def test_signals_to_other_processes_are_refused(pool: ProcessSandbox) -> None:
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        code = "import os, signal\ndef main(pid: int):\n    os.kill(pid, signal.SIGTERM)\n"
        with pytest.raises(CodeSandboxViolationError) as caught:
            pool.execute("python3", code, {"pid": bystander.pid})
        assert caught.value.message_key == "errors.code.violation.signal"
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
    still_runs(pool)


def test_jobs_hold_no_capabilities(pool: ProcessSandbox) -> None:
    code = (
        "import ctypes\n"
        "def main():\n"
        "    header = (ctypes.c_uint32 * 2)(0x20080522, 0)\n"
        "    data = (ctypes.c_uint32 * 6)()\n"
        "    rc = ctypes.CDLL(None).capget(header, data)\n"
        "    return {'rc': rc, 'effective': [data[0], data[3]], 'permitted': [data[1], data[4]]}\n"
    )
    assert pool.execute("python3", code, {}) == {"rc": 0, "effective": [0, 0], "permitted": [0, 0]}


def test_job_processes_die_with_their_worker() -> None:
    # A bare worker, not the pool: nobody kills the process group for it.
    from firstgate.sandbox.process_pool import ProcessSandbox as Pool
    from firstgate.sandbox.worker_process import WorkerBroken, WorkerProcess

    config = Pool()._make_worker_config()
    worker = WorkerProcess(config)
    try:
        done = threading.Event()

        def slow() -> None:
            job = {
                "language": "python3",
                "code": "import time\ndef main():\n    time.sleep(60)\n",
                "inputs": {},
            }
            with contextlib.suppress(WorkerBroken):
                worker.run(job, None)
            done.set()

        threading.Thread(target=slow, daemon=True).start()
        time.sleep(0.5)
        os.kill(worker.pid, 9)  # the worker alone, not its process group
        assert done.wait(10)
        worker.process.wait(10)  # reaped, so only its job processes could be left
        for _ in range(100):  # they follow it (PDEATHSIG)
            try:
                os.killpg(worker.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("a job process outlived its worker")
    finally:
        worker.stop(grace_s=0)


def test_raising_the_limits_again_is_refused(pool: ProcessSandbox) -> None:
    code = (
        "import resource\n"
        "def main():\n"
        "    try:\n"
        "        resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY,) * 2)\n"
        "        return {'raised': True}\n"
        "    except (OSError, ValueError):\n"
        "        return {'raised': False, 'cpu': resource.getrlimit(resource.RLIMIT_CPU)[0],\n"
        "                'nproc': resource.getrlimit(resource.RLIMIT_NPROC)[0]}\n"
    )
    result = pool.execute("python3", code, {})
    assert result == {"raised": False, "cpu": 1, "nproc": SMALL.processes}


def test_a_crashing_job_is_reported_and_the_next_runs(pool: ProcessSandbox) -> None:
    code = "import ctypes\ndef main():\n    ctypes.string_at(0)\n"
    with pytest.raises(CodeExecutionError) as caught:
        pool.execute("python3", code, {})
    assert caught.value.message_key == "errors.code.crashed"
    assert "SIGSEGV" in str(caught.value)
    still_runs(pool)


def test_user_errors_name_the_exception_and_line(pool: ProcessSandbox) -> None:
    code = "def main():\n    x = 1\n    return {'y': x / 0}\n"
    with pytest.raises(CodeExecutionError) as caught:
        pool.execute("python3", code, {})
    assert caught.value.message_key == "errors.code.exceptionAtLine"
    assert caught.value.params == {
        "type": "ZeroDivisionError",
        "message": "division by zero",
        "line": 3,
    }


def test_wrong_shapes_of_main(pool: ProcessSandbox) -> None:
    with pytest.raises(CodeExecutionError) as caught:
        pool.execute("python3", "x = 1\n", {})
    assert caught.value.message_key == "errors.code.noMain"
    with pytest.raises(CodeExecutionError) as caught:
        pool.execute("python3", "def main():\n    return [1]\n", {})
    assert caught.value.message_key == "errors.code.notDict"
    with pytest.raises(CodeExecutionError) as caught:
        pool.execute("python3", "def main():\n    return {'s': {1, 2}}\n", {})
    assert caught.value.message_key == "errors.code.notJson"


def test_jobs_share_no_state(pool: ProcessSandbox) -> None:
    first = "import json\njson.LEAK = 'from an earlier job'\ndef main():\n    return {}\n"
    second = "import json\ndef main():\n    return {'leak': getattr(json, 'LEAK', None)}\n"
    for _ in range(3):  # every worker sees the first job at least once
        pool.execute("python3", first, {})
    assert pool.execute("python3", second, {}) == {"leak": None}


def test_a_worker_that_dies_is_replaced(pool: ProcessSandbox) -> None:
    victims = [w.pid for w in list(pool._workers)]
    for pid in victims:
        os.killpg(pid, 9)
    failures = 0
    for _ in range(len(victims)):
        try:
            still_runs(pool)
        except CodeExecutionError as exc:
            assert exc.message_key == "errors.code.workerFailed"
            failures += 1
    still_runs(pool)
    assert not {w.pid for w in pool._workers} & set(victims)


def test_cancel_kills_the_running_job_at_once(pool: ProcessSandbox) -> None:
    from firstgate.common.cancel import CancelToken

    token = CancelToken()
    code = "import time\ndef main():\n    time.sleep(30)\n"
    threading.Timer(0.3, token.cancel, args=("aborted by the test",)).start()
    started = time.monotonic()
    with pytest.raises(CodeCancelledError):
        pool.execute("python3", code, {}, cancel=token)
    assert time.monotonic() - started < SMALL.wall_s
    still_runs(pool)


def test_close_leaves_no_process_behind() -> None:
    with small_sandbox(workers=2) as pool:
        pool.execute("python3", ADD, {"a": 1})
        pids = [w.pid for w in pool._workers]
        dirs = [w.base_dir for w in pool._workers]
        janitors = [w.janitor_pid for w in pool._workers]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    assert not any(os.path.exists(d) for d in dirs)
    for pid in janitors:  # in sessions of their own; they see the runtime let go
        assert pid is not None
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("a worker's janitor outlived the pool")


def test_a_missing_node_is_named(tmp_path: os.PathLike[str]) -> None:
    with small_sandbox(workers=1, node=os.path.join(str(tmp_path), "no-such-node")) as pool:
        with pytest.raises(CodeRuntimeUnavailableError) as caught:
            pool.execute("javascript", "function main() { return {} }", {})
        assert caught.value.params["runtime"] == "Node.js"
        assert "Node.js" in str(caught.value)


@pytest.mark.skipif(not HAS_NODE, reason="Node.js is not installed")
class TestJavaScript:
    def test_runs(self, pool: ProcessSandbox) -> None:
        code = "function main({a}) { return {b: a + 1, c: [a, 'x']} }"
        assert pool.execute("javascript", code, {"a": 41}) == {"b": 42, "c": [41, "x"]}

    def test_async_main_is_awaited(self, pool: ProcessSandbox) -> None:
        code = "async function main({a}) { await null; return {b: a * 2} }"
        assert pool.execute("javascript", code, {"a": 21}) == {"b": 42}

    def test_exception_names_type_and_line(self, pool: ProcessSandbox) -> None:
        code = "function main() {\n  return {x: undefinedThing.y}\n}"
        with pytest.raises(CodeExecutionError) as caught:
            pool.execute("javascript", code, {})
        assert caught.value.params["type"] == "ReferenceError"
        assert caught.value.params["line"] == 2

    def test_infinite_loop(self, pool: ProcessSandbox) -> None:
        with pytest.raises(CodeTimeoutError):
            pool.execute("javascript", "function main() { while (true) {} }", {})
        still_runs(pool)

    def test_memory_hog(self, pool: ProcessSandbox) -> None:
        code = "function main() { const a = []; while (true) a.push(new Array(1e6).fill(1.5)) }"
        with pytest.raises(CodeResourceLimitError) as caught:
            pool.execute("javascript", code, {})
        assert caught.value.message_key == "errors.code.memoryLimit"
        still_runs(pool)

    def test_memory_outside_the_js_heap_is_limited_too(self, pool: ProcessSandbox) -> None:
        # Buffers live outside V8's heap, so its heap flag does not see them;
        # stops by itself at 2 GB.
        code = (
            "function main() {\n"
            "  const blocks = [];\n"
            "  for (let i = 0; i < 128; i++) blocks.push(Buffer.alloc(16 * 1024 * 1024, 1));\n"
            "  return {n: blocks.length};\n"
            "}"
        )
        with pytest.raises(CodeResourceLimitError) as caught:
            pool.execute("javascript", code, {})
        assert caught.value.message_key == "errors.code.memoryLimit"
        still_runs(pool)

    def test_child_process_is_refused(self, pool: ProcessSandbox) -> None:
        code = "function main() { require('child_process').execSync('true'); return {} }"
        with pytest.raises(CodeSandboxViolationError) as caught:
            pool.execute("javascript", code, {})
        assert caught.value.message_key == "errors.code.violation.process"

    def test_network_is_refused(self, pool: ProcessSandbox, listener: _Listener) -> None:
        code = (
            "async function main({port}) {\n"
            "  await fetch(`http://127.0.0.1:${port}/`); return {}\n"
            "}"
        )
        with pytest.raises(CodeSandboxViolationError) as caught:
            pool.execute("javascript", code, {"port": listener.port})
        assert caught.value.message_key == "errors.code.violation.network"
        assert not listener.connected.wait(0.3)

    def test_network_below_the_guards_is_refused_by_the_kernel(
        self, pool: ProcessSandbox, listener: _Listener
    ) -> None:
        # process.binding reaches the TCP handle without going through require('net').
        code = (
            "function main({port}) {\n"
            "  const { TCP, constants } = process.binding('tcp_wrap');\n"
            "  const { TCPConnectWrap } = process.binding('tcp_wrap');\n"
            "  const handle = new TCP(constants.SOCKET);\n"
            "  const req = new TCPConnectWrap();\n"
            "  const rc = handle.connect(req, '127.0.0.1', port);\n"
            "  return {rc};\n"
            "}"
        )
        try:
            result = pool.execute("javascript", code, {"port": listener.port})
            assert result["rc"] < 0  # a libuv error code: the socket could not be made
        except CodeExecutionError:
            pass  # refused some other way: also fine, as long as nothing connected
        assert not listener.connected.wait(0.5)

    def test_environment_is_scrubbed(self, pool: ProcessSandbox) -> None:
        code = "function main() { return {keys: Object.keys(process.env).sort()} }"
        keys = pool.execute("javascript", code, {})["keys"]
        assert set(keys) <= {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "FIRSTGATE_NETWORK"}


def test_a_caller_waiting_for_a_busy_pool_can_be_cancelled() -> None:
    from firstgate.common.cancel import CancelToken

    with small_sandbox(workers=1) as single:

        def occupy() -> None:
            with contextlib.suppress(CodeExecutionError):
                single.execute(
                    "python3", "import time\ndef main():\n    time.sleep(2)\n    return {}\n", {}
                )

        slow = threading.Thread(target=occupy, daemon=True)
        slow.start()
        time.sleep(0.3)  # the only worker is busy now
        token = CancelToken()
        threading.Timer(0.2, token.cancel, args=("stop",)).start()
        started = time.monotonic()
        with pytest.raises(CodeCancelledError):
            single.execute("python3", ADD, {"a": 1}, cancel=token)
        assert time.monotonic() - started < 1.5  # did not wait for the busy worker
        slow.join(10)


RUNTIME_THAT_DIES = """
import os, sys, threading, time
from firstgate.sandbox.process_pool import ProcessSandbox, ProcessSandboxConfig
from firstgate.sandbox.worker_process import SandboxLimits
pool = ProcessSandbox(ProcessSandboxConfig(workers=1, limits=SandboxLimits(wall_s=120, cpu_s=60)))
pool.start()
(worker,) = list(pool._workers)
threading.Thread(target=pool.execute, args=("python3", "import time\\ndef main():\\n    time.sleep(100)\\n", {}), daemon=True).start()
time.sleep(2)  # the worker has forked ahead and waits for requests
print(worker.pid, worker.base_dir, flush=True)
os._exit(1)  # no clean-up of any kind
"""


def test_workers_exit_when_the_runtime_dies() -> None:
    import sys

    out = subprocess.run(
        [sys.executable, "-c", RUNTIME_THAT_DIES],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    pid, base_dir = out.stdout.split()
    worker_pid = int(pid)
    try:
        for _ in range(100):  # the worker sees its socket close, ends the job and exits
            try:
                os.killpg(worker_pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        os.killpg(worker_pid, 9)
        pytest.fail("the sandbox worker outlived the runtime that started it")
    finally:
        # The worker's janitor removes it (tests/integration/test_sandbox_job_files.py);
        # this is only for a failure above.
        import shutil

        shutil.rmtree(base_dir, ignore_errors=True)


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(
    not os.path.exists(SYSTEM_PYTHON)
    or os.path.realpath(SYSTEM_PYTHON) == os.path.realpath(__import__("sys").executable),
    reason="needs a second Python interpreter",
)
def test_the_workers_interpreter_can_be_another_python() -> None:
    # Its own library directories are found and allowed, the runtime's are not needed.
    code = "import sys, json, decimal\ndef main():\n    return {'exe': sys.executable}\n"
    with small_sandbox(workers=1, python=SYSTEM_PYTHON) as other:
        assert other.execute("python3", code, {}) == {"exe": SYSTEM_PYTHON}


def test_the_standard_library_beyond_the_preloaded_modules_imports(pool: ProcessSandbox) -> None:
    # Not imported by the worker ahead: read from the interpreter's own directories,
    # which the file-system allow-list must include.
    code = (
        "import difflib, pprint, xml.etree.ElementTree as ET, zoneinfo\n"
        "def main():\n"
        "    return {'ratio': difflib.SequenceMatcher(None, 'abc', 'abd').ratio(),\n"
        "            'tag': ET.fromstring('<a/>').tag}\n"
    )
    assert pool.execute("python3", code, {}) == {"ratio": 2 / 3, "tag": "a"}
