"""The runtime's side of a sandbox worker against a scripted peer on real socket
pairs: a worker (or job process) that goes silent, lies about its size,
hangs up, or cannot confine itself is never trusted."""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import time
from typing import Any

import pytest
from firstgate.sandbox import worker_process
from firstgate.sandbox.errors import CodeRuntimeUnavailableError
from firstgate.sandbox.worker import framing
from firstgate.sandbox.worker_process import (
    SandboxLimits,
    WorkerBroken,
    WorkerConfig,
    WorkerProcess,
    WorkerTimeout,
)

LIMITS = SandboxLimits(wall_s=0.3, output_bytes=1024)
JOB = {"language": "python3", "code": "", "inputs": {}}


def bare_worker(require_landlock: bool = True) -> tuple[WorkerProcess, socket.socket]:
    ours, theirs = socket.socketpair()
    worker = object.__new__(WorkerProcess)
    worker.config = WorkerConfig(
        python=sys.executable,
        node=None,
        read_only=(),
        env={},
        limits=LIMITS,
        require_landlock=require_landlock,
    )
    worker.base_dir = "/nonexistent"
    worker.isolation = {}
    worker._sock = ours
    worker._send_lock = threading.Lock()
    worker._spare = worker_process.deque()
    worker._spawned = worker_process.deque()
    return worker, theirs


def announce(peer: socket.socket) -> socket.socket:
    """Play the worker: hand the runtime a 'job process' (our socket and a pidfd)."""
    job_end, runtime_end = socket.socketpair()
    pidfd = os.pidfd_open(os.getpid())  # a stand-in; the tests never signal it
    socket.send_fds(peer, [framing.encode({"warm": 4242})], [runtime_end.fileno(), pidfd])
    runtime_end.close()
    os.close(pidfd)
    return job_end


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_process, "GRACE_S", 0.2)
    monkeypatch.setattr(worker_process.Channel, "kill", lambda self: None)


def run_in_thread(worker: WorkerProcess) -> list[Any]:
    """worker.run in a thread that must end (fail, not hang, when it does not)."""
    outcome: list[Any] = []

    def wait() -> None:
        try:
            outcome.append(worker.run(dict(JOB), None))
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "still waiting"
    return outcome


def test_a_worker_that_never_hands_out_a_process_is_given_up_on() -> None:
    worker, peer = bare_worker()
    (outcome,) = run_in_thread(worker)
    assert isinstance(outcome, WorkerTimeout)
    peer.close()


def test_a_silent_job_process_is_ended_at_the_deadline() -> None:
    worker, peer = bare_worker()
    job_end = announce(peer)
    (outcome,) = run_in_thread(worker)
    assert outcome == {"status": "error", "kind": "timeout", "limit": LIMITS.wall_s}
    assert framing.receive(job_end, 1 << 20)["language"] == "python3"  # the job did go out
    assert framing.receive(peer, 4096, time.monotonic() + 5) == {"release": 4242}


def test_a_result_larger_than_the_cap_is_refused_unread() -> None:
    worker, peer = bare_worker()
    job_end = announce(peer)
    job_end.sendall(struct.pack(">I", 200 << 20))  # claims 200 MB, sends nothing more
    (outcome,) = run_in_thread(worker)
    assert outcome == {"status": "error", "kind": "output", "limit": LIMITS.output_bytes}


def test_a_job_process_that_hangs_up_is_asked_about() -> None:
    worker, peer = bare_worker()
    job_end = announce(peer)
    job_end.close()

    def worker_side() -> None:
        assert framing.receive(peer, 4096) == {"status": 4242}
        framing.send(
            peer, {"ended": 4242, "answer": {"status": "error", "kind": "cpu", "limit": 1}}
        )

    threading.Thread(target=worker_side, daemon=True).start()
    (outcome,) = run_in_thread(worker)
    assert outcome == {"status": "error", "kind": "cpu", "limit": 1}


def test_an_oversized_control_frame_breaks_the_worker() -> None:
    worker, peer = bare_worker()
    peer.sendall(struct.pack(">I", 200 << 20))
    (outcome,) = run_in_thread(worker)
    assert isinstance(outcome, WorkerBroken) and not isinstance(outcome, WorkerTimeout)
    assert "larger than the limit" in str(outcome)


def test_a_flood_of_announcements_breaks_the_worker() -> None:
    worker, peer = bare_worker()
    worker._spare.extend(object() for _ in range(worker_process._MAX_CHANNELS))  # type: ignore[misc]
    worker._spare.popleft()  # one short of the cap: the next announcement fills it
    announce(peer)
    announce(peer)
    with pytest.raises(framing.FrameError):
        worker._read_one(10**9)
        worker._read_one(10**9)


def handshake_with(isolation: dict[str, Any], require_landlock: bool = True) -> WorkerProcess:
    worker, peer = bare_worker(require_landlock)

    def answer() -> None:
        framing.receive(peer, 1 << 20)
        framing.send(peer, {"ready": True, "isolation": isolation})

    threading.Thread(target=answer, daemon=True).start()
    worker._handshake()
    return worker


def test_no_seccomp_means_no_worker() -> None:
    with pytest.raises(CodeRuntimeUnavailableError) as caught:
        handshake_with({"seccomp": False, "seccomp_error": "EINVAL", "landlock": {"abi": 7}})
    assert caught.value.message_key == "errors.code.isolationMissing"


def test_no_landlock_means_no_worker_unless_allowed() -> None:
    missing = {"seccomp": True, "landlock": None, "landlock_error": "ENOSYS"}
    with pytest.raises(CodeRuntimeUnavailableError) as caught:
        handshake_with(missing)
    assert caught.value.message_key == "errors.code.landlockMissing"
    assert handshake_with(missing, require_landlock=False).isolation == missing
