"""The runtime's side of a sandbox worker against a scripted peer on a real
socket pair: a worker that goes silent, lies about its size, hangs up, or
cannot confine itself is never trusted."""

from __future__ import annotations

import socket
import struct
import sys
import threading
from typing import Any

import pytest

from sandbox import worker_process
from sandbox.errors import CodeRuntimeUnavailableError
from sandbox.worker import framing
from sandbox.worker_process import (
    SandboxLimits,
    WorkerBroken,
    WorkerConfig,
    WorkerProcess,
    WorkerTimeout,
)

LIMITS = SandboxLimits(wall_s=0.2, output_bytes=1024)


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
    return worker, theirs


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_process, "GRACE_S", 0.2)


def test_a_silent_worker_is_given_up_on_after_timeout_and_grace() -> None:
    worker, peer = bare_worker()
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            worker.run({"language": "python3", "code": "", "inputs": {}}, None)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "still waiting for a worker that never answers"
    assert isinstance(outcome[0], WorkerTimeout)
    peer.close()


def test_a_frame_larger_than_the_cap_is_refused_unread() -> None:
    worker, peer = bare_worker()
    peer.sendall(struct.pack(">I", 200 << 20))  # claims 200 MB, sends nothing more
    with pytest.raises(WorkerBroken) as caught:
        worker.run({"language": "python3", "code": "", "inputs": {}}, None)
    assert not isinstance(caught.value, WorkerTimeout)  # refused at the header
    assert "larger than the limit" in str(caught.value)


def test_a_worker_that_hangs_up_is_broken() -> None:
    worker, peer = bare_worker()
    peer.close()
    with pytest.raises(WorkerBroken):
        worker.run({"language": "python3", "code": "", "inputs": {}}, None)


def test_stale_answers_are_skipped() -> None:
    worker, peer = bare_worker()

    def answer() -> None:
        job = framing.receive(peer, 1 << 20)
        framing.send(peer, {"id": -1, "status": "ok", "result": {"stale": True}})
        framing.send(peer, {"id": job["id"], "status": "ok", "result": {"fresh": True}})

    threading.Thread(target=answer, daemon=True).start()
    reply = worker.run({"language": "python3", "code": "", "inputs": {}}, None)
    assert reply["result"] == {"fresh": True}


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
