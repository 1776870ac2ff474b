"""What a job may write, how much, and for how long.

A job writes only in its own directory: not in the worker's directory, not in
the directories of the job processes forked ahead for later jobs (other apps
on the same serve). The job directories of one worker together stay under the
disk budget, nothing a job writes outlives it, and a worker's directory goes
away with its runtime, even one killed outright.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from firstgate.sandbox.errors import CodeResourceLimitError
from firstgate.sandbox.process_pool import ProcessSandbox
from firstgate.sandbox.worker_process import WorkerProcess

from tests.integration.sandbox_support import SMALL, small_sandbox

REPO = Path(__file__).resolve().parents[2]
ADD = "def main(a: int) -> dict:\n    return {'b': a + 1}\n"


# A small disk budget, and CPU time to spare for creating files on a busy machine.
LIMITS = replace(SMALL, disk_mb=2, cpu_s=30.0, wall_s=30.0)


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessSandbox]:
    with small_sandbox(workers=1, limits=LIMITS) as started:
        yield started


def the_worker(pool: ProcessSandbox) -> WorkerProcess:
    (worker,) = list(pool._workers)
    return worker


def job_dirs(worker: WorkerProcess, at_least: int = 0) -> list[str]:
    """The worker's job directories, once there are `at_least` of them, each
    with the standard error file its process makes when it starts."""
    for _ in range(200):
        found = sorted(str(p.parent) for p in Path(worker.base_dir).glob("job-*/stderr"))
        if len(found) >= at_least:
            return found
        time.sleep(0.025)
    pytest.fail(f"the worker did not fork {at_least} job processes ahead")


TRESPASS = """
import errno, os

def attempt(call):
    try:
        call()
        return 'done'
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))

def plant(path):
    with open(path, 'w') as fh:
        fh.write('planted')

def main(base: str, dirs: list) -> dict:
    own = os.getcwd()
    report = {'own': attempt(lambda: plant(os.path.join(own, 'mine.txt'))),
              'base_write': attempt(lambda: plant(os.path.join(base, 'planted.txt'))),
              'base_list': attempt(lambda: os.listdir(base)),
              'base_log': attempt(lambda: open(os.path.join(base, 'worker.log')).read())}
    for other in dirs:
        if other == own:
            continue
        name = os.path.basename(other)
        report[name + ':write'] = attempt(lambda: plant(os.path.join(other, 'planted.txt')))
        report[name + ':symlink'] = attempt(
            lambda: os.symlink('/etc/passwd', os.path.join(other, 'result.json')))
        report[name + ':read'] = attempt(lambda: open(os.path.join(other, 'stderr')).read())
        report[name + ':list'] = attempt(lambda: os.listdir(other))
    return report
"""


def test_a_job_writes_and_reads_only_its_own_directory(pool: ProcessSandbox) -> None:
    worker = the_worker(pool)
    dirs = job_dirs(worker, at_least=3)  # the one that runs the job and those after it
    report = pool.execute("python3", TRESPASS, {"base": worker.base_dir, "dirs": dirs})
    assert report.pop("own") == "done"
    assert len(report) == 3 + 4 * (len(dirs) - 1), (dirs, report)
    assert set(report.values()) == {"EACCES"}, report
    planted = [
        p for p in Path(worker.base_dir).rglob("*") if p.name in ("planted.txt", "result.json")
    ]
    assert planted == []


def test_nothing_a_job_writes_outlives_it(pool: ProcessSandbox) -> None:
    code = (
        "import os\n"
        "def main() -> dict:\n"
        "    with open('kept.bin', 'wb') as fh:\n"
        "        fh.write(b'x' * (1 << 20))\n"
        "    return {'path': os.path.abspath('kept.bin')}\n"
    )
    path = pool.execute("python3", code, {})["path"]
    for _ in range(200):  # removed with its directory once the job is released
        if not os.path.exists(os.path.dirname(path)):
            break
        time.sleep(0.025)
    else:
        pytest.fail("the job's directory outlived the job")


def test_directories_a_job_locks_are_removed_all_the_same(pool: ProcessSandbox) -> None:
    worker = the_worker(pool)
    code = (
        "import os\n"
        "def main() -> dict:\n"
        "    os.makedirs('a/b')\n"
        "    open('a/b/f', 'w').close()\n"
        "    os.chmod('a/b', 0)\n"
        "    os.chmod('a', 0o100)\n"
        "    return {'dir': os.getcwd()}\n"
    )
    job_dir = pool.execute("python3", code, {})["dir"]
    assert pool.execute("python3", ADD, {"a": 1}) == {"b": 2}
    assert the_worker(pool) is worker  # its worker did not break over it
    for _ in range(200):
        if not os.path.lexists(job_dir):
            break
        time.sleep(0.025)
    else:
        pytest.fail("the locked directory was left behind")


# Each holds its files for longer than the worker takes to notice them.
DISK_HOGS = {
    "large files": (
        "import time\n"
        "def main() -> dict:\n"
        "    for i in range(4):\n"  # 4 MiB in files of 1 MiB, under the file-size limit
        "        with open(f'part{i}', 'wb') as fh:\n"
        "            fh.write(b'x' * (1 << 20))\n"
        "    time.sleep(5)\n"
        "    return {}\n"
    ),
    "many empty files": (
        "import time\n"
        "def main() -> dict:\n"
        "    for i in range(1000):\n"  # nothing in them, but 1,000 entries
        "        open(f'f{i}', 'w').close()\n"
        "    time.sleep(5)\n"
        "    return {}\n"
    ),
    "files in a directory the worker may not read": (
        "import os, time\n"
        "def main() -> dict:\n"
        "    os.mkdir('hidden')\n"
        "    os.chmod('hidden', 0o300)\n"  # files go in, nobody may list them
        "    for i in range(4):\n"
        "        with open(f'hidden/part{i}', 'wb') as fh:\n"
        "            fh.write(b'x' * (1 << 20))\n"
        "    time.sleep(5)\n"
        "    return {}\n"
    ),
}


@pytest.mark.parametrize("code", list(DISK_HOGS.values()), ids=list(DISK_HOGS))
def test_a_job_past_the_disk_budget_is_stopped(pool: ProcessSandbox, code: str) -> None:
    started = time.monotonic()
    with pytest.raises(CodeResourceLimitError) as caught:
        pool.execute("python3", code, {})
    assert caught.value.message_key == "errors.code.diskLimit"
    assert caught.value.params["limit"] == LIMITS.disk_mb
    assert time.monotonic() - started < 4.5  # stopped, not finished
    assert pool.execute("python3", ADD, {"a": 1}) == {"b": 2}


def test_disk_use_within_the_budget_is_fine(pool: ProcessSandbox) -> None:
    code = (
        "import os, time\n"
        "def main() -> dict:\n"
        "    with open('part', 'wb') as fh:\n"
        "        fh.write(b'x' * (1 << 20))\n"
        "    time.sleep(0.5)\n"
        "    return {'files': sorted(os.listdir('.'))}\n"
    )
    assert pool.execute("python3", code, {}) == {"files": ["part", "stderr"]}


KILLED_RUNTIME = """
import os, signal, sys, time
from firstgate.sandbox.process_pool import ProcessSandbox, ProcessSandboxConfig
pool = ProcessSandbox(ProcessSandboxConfig(workers=1))
pool.start()
(worker,) = list(pool._workers)
print(worker.pid, worker.base_dir, flush=True)
if sys.argv[1] == "with-workers":  # everything at once, as a cgroup's kill would
    os.kill(worker.janitor_pid, signal.SIGKILL)
    os.killpg(worker.pid, signal.SIGKILL)
    os.waitpid(worker.pid, 0)
os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_runtime(how: str) -> tuple[int, str]:
    out = subprocess.run(
        [sys.executable, "-c", KILLED_RUNTIME, how],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    pid, base_dir = out.stdout.split()
    return int(pid), base_dir


def test_a_killed_runtime_leaves_no_worker_directory() -> None:
    worker_pid, base_dir = killed_runtime("alone")
    for _ in range(200):  # its workers see the runtime gone, and remove their directories
        if not os.path.exists(base_dir):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"{base_dir} outlived the runtime")
    for _ in range(100):
        try:
            os.killpg(worker_pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail("a process of the worker outlived the runtime")


def test_directories_of_a_runtime_killed_with_its_workers_are_reaped_at_the_next_start() -> None:
    _, stale = killed_runtime("with-workers")
    assert os.path.isdir(stale)  # nobody was left to remove it
    not_ours = tempfile.mkdtemp(prefix="firstgate-sandbox-")  # no owner mark: not judged
    try:
        with small_sandbox(workers=1) as first:
            live = the_worker(first).base_dir
            with small_sandbox(workers=1):
                assert not os.path.exists(stale)
                assert os.path.isdir(live)  # its runtime is alive
                assert os.path.isdir(not_ours)
            assert first.execute("python3", ADD, {"a": 1}) == {"b": 2}
    finally:
        os.rmdir(not_ours)


# A runtime that adopts every orphan below it (a child subreaper, as an init
# would): whatever the pool's close leaves to be adopted comes to it.
ADOPTER = """
import ctypes, os, time
assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
from firstgate.sandbox.process_pool import ProcessSandbox, ProcessSandboxConfig
pool = ProcessSandbox(ProcessSandboxConfig(workers=1))
pool.start()
assert pool.execute("python3", "def main():\\n    return {}\\n", {}) == {}
pool.close()
time.sleep(1.0)
try:
    print(os.waitpid(-1, os.WNOHANG))  # a child left: an orphan, alive (0, 0) or not
except ChildProcessError:
    print("none")
"""


def test_a_closed_pool_leaves_no_orphan_to_adopt() -> None:
    out = subprocess.run(
        [sys.executable, "-c", ADOPTER], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert out.stdout.strip() == "none", out.stdout + out.stderr
