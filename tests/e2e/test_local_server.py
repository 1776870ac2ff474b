"""LlamaServer against the real llama-server binary, real model, real sockets."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import firstgate.runtime.models.local_server as ls
import httpx
import pytest
from firstgate.runtime.models.local_model import LlamaServerNotFoundError, ModelNotFoundError
from firstgate.runtime.models.local_server import (
    ExternalLlamaServer,
    LlamaServer,
    LlamaServerStartError,
    LlamaServerStartTimeoutError,
    LocalServer,
    PortInUseError,
    local_server,
)

from tests.e2e.signals import default_sigint

REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pid: int, within: float) -> float:
    t0 = time.monotonic()
    while _alive(pid):
        if time.monotonic() - t0 > within:
            pytest.fail(f"process {pid} still alive {within} s later")
        time.sleep(0.05)
    return time.monotonic() - t0


def _sse_events(response: httpx.Response) -> Iterator[str]:
    for line in response.iter_lines():
        if line.startswith("data:"):
            yield line[len("data:") :].strip()


# ------------------------------------------------------------------ the shared server


def test_shared_server_urls_and_health(llama_server: LocalServer) -> None:
    assert llama_server.base_url == llama_server.root_url + "/v1"
    if not llama_server.is_external:
        assert llama_server.root_url.startswith("http://127.0.0.1:")
    assert httpx.get(llama_server.root_url + "/health", timeout=5).status_code == 200


def test_streams_real_tokens(llama_server: LocalServer) -> None:
    body = {
        "model": "local",
        "messages": [{"role": "user", "content": "Name three colours."}],
        "stream": True,
        "max_tokens": 24,
        "temperature": 0,
    }
    contents: list[str] = []
    done = False
    t0 = time.monotonic()
    with (
        httpx.Client(timeout=httpx.Timeout(30.0)) as client,
        client.stream("POST", llama_server.base_url + "/chat/completions", json=body) as resp,
    ):
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for data in _sse_events(resp):
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            delta = chunk["choices"][0]["delta"]
            if delta.get("content"):
                contents.append(delta["content"])
    assert done, "stream did not end with [DONE]"
    assert len(contents) >= 2, f"expected several content tokens, got {contents!r}"
    assert "".join(contents).strip()
    assert time.monotonic() - t0 < 30


def test_slots_and_metrics_answer(llama_server: LocalServer) -> None:
    slots = httpx.get(llama_server.root_url + "/slots", timeout=5)
    assert slots.status_code == 200
    slot_list = slots.json()
    assert isinstance(slot_list, list)
    if not llama_server.is_external:
        assert len(slot_list) == 2  # --parallel 2
        assert {"id", "is_processing"} <= set(slot_list[0])
    metrics = httpx.get(llama_server.root_url + "/metrics", timeout=5)
    assert metrics.status_code == 200
    assert "llamacpp:" in metrics.text


def test_external_server_is_not_started_or_stopped(
    llama_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIRSTGATE_LOCAL_BASE_URL", llama_server.base_url + "/")
    handle = local_server(ctx_size=1)
    assert isinstance(handle, ExternalLlamaServer)
    with handle as server:
        assert server.base_url == llama_server.base_url
        assert server.root_url == llama_server.root_url
        assert server.health() == 200
    assert LlamaServer.external(llama_server.root_url) == handle
    assert httpx.get(llama_server.root_url + "/health", timeout=5).status_code == 200


# ------------------------------------------------------------------ own servers


def test_start_stop_and_time(llama_binary: Path, model_file: Path) -> None:
    server = LlamaServer(model_file, binary=llama_binary, ctx_size=512)
    with server:
        pid = server.pid
        assert pid is not None and _alive(pid)
        assert server.health() == 200
        assert server.start_seconds is not None and server.start_seconds < 60
        print(f"llama-server start: {server.start_seconds:.2f} s")
        log_path = server.log_path
        assert log_path is not None and log_path.is_file()
        assert "--metrics" in server.log_tail(200)
    assert server.pid is None
    _wait_gone(pid, 1.0)  # stop() already reaped it
    assert not log_path.exists()


def test_a_reply_stops_at_the_servers_token_cap(llama_binary: Path, model_file: Path) -> None:
    """Asked with no max_tokens (an app that sets none), a started server still
    stops: at its cap (`MAX_TOKENS` by default; 8 here), finish reason `length`."""
    with LlamaServer(model_file, binary=llama_binary, ctx_size=512, max_tokens=8) as server:
        body = {
            "messages": [{"role": "user", "content": "Count from one to one hundred in words."}],
            "temperature": 0,
        }
        reply = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=120).json()
    assert reply["usage"]["completion_tokens"] == 8
    assert reply["choices"][0]["finish_reason"] == "length"
    assert LlamaServer().max_tokens == ls.MAX_TOKENS > 0


def test_explicit_port_taken_is_a_clear_error(llama_binary: Path, model_file: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"port {port} .* already in use"):
            LlamaServer(model_file, binary=llama_binary, port=port).start()


def test_port_lost_to_a_race_is_retried(
    llama_binary: Path, model_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_free_port = ls.free_port
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        offered = iter([taken])
        # The first "free" port is taken by the time llama-server binds it.
        monkeypatch.setattr(ls, "free_port", lambda host: next(offered, None) or real_free_port())
        with LlamaServer(model_file, binary=llama_binary, ctx_size=512) as server:
            assert server.port != taken
            assert server.health() == 200
            log = server.log_tail(400)
            assert "attempt 1" in log and "attempt 2" in log
            assert f"--port {taken}" in log


def test_missing_binary_says_how_to_install(
    model_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIRSTGATE_LLAMA_SERVER", str(tmp_path / "no-such-llama-server"))
    with pytest.raises(LlamaServerNotFoundError, match="FIRSTGATE_LLAMA_SERVER"):
        LlamaServer(model_file).start()


def test_missing_model_says_how_to_fetch(
    llama_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ModelNotFoundError, match="firstgate.runtime.models.local_model fetch"):
        LlamaServer(tmp_path / "absent.gguf", binary=llama_binary).start()
    monkeypatch.setenv("FIRSTGATE_MODEL_DIR", str(tmp_path / "empty"))
    with pytest.raises(ModelNotFoundError, match="make model"):
        LlamaServer(binary=llama_binary).start()


def _fake_binary(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "llama-server"
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def test_server_dying_at_start_shows_log_tail(tmp_path: Path) -> None:
    fake = _fake_binary(
        tmp_path,
        """\
        echo "loading things" >&2
        echo "error: the fake server refuses to start (args: $*)" >&2
        exit 1
        """,
    )
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    t0 = time.monotonic()
    with pytest.raises(LlamaServerStartError) as info:
        LlamaServer(model, binary=fake).start()
    assert time.monotonic() - t0 < 10
    err = info.value
    assert not isinstance(err, PortInUseError)
    assert err.returncode == 1
    assert "the fake server refuses to start" in str(err)
    assert "the fake server refuses to start" in err.log_tail
    assert "--metrics" in err.log_tail  # the args reached it


def test_real_server_dying_on_a_broken_model(llama_binary: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(LlamaServerStartError) as info:
        LlamaServer(broken, binary=llama_binary, start_timeout=60).start()
    assert info.value.returncode not in (None, 0)
    assert f"failed to load model from {broken}" in info.value.log_tail


def test_start_timeout_kills_the_server(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    fake = _fake_binary(tmp_path, f'echo $$ > "{pid_file}"\nexec sleep 600\n')
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(LlamaServerStartTimeoutError, match="did not become healthy within 1 s"):
        LlamaServer(model, binary=fake, start_timeout=1.0).start()
    _wait_gone(int(pid_file.read_text()), 1.0)


# ------------------------------------------------------------------ no orphans

_CHILD = """
import sys, time
from pathlib import Path
from firstgate.runtime.models.local_server import LlamaServer

model, binary, die_with_parent = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1"
with LlamaServer(model, binary=binary, ctx_size=512, die_with_parent=die_with_parent) as s:
    print(s.pid, flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize(
    ("sig", "die_with_parent"),
    [
        pytest.param(signal.SIGTERM, False, id="SIGTERM-handler"),
        pytest.param(signal.SIGKILL, True, id="SIGKILL-pdeathsig"),
        pytest.param(signal.SIGINT, False, id="SIGINT-ctrl-c"),
    ],
)
def test_killing_the_parent_leaves_no_orphan(
    llama_binary: Path, model_file: Path, sig: signal.Signals, die_with_parent: bool
) -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _CHILD,
            str(model_file),
            str(llama_binary),
            str(int(die_with_parent)),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip().isdigit(), (
            f"child failed: {line!r} {child.stderr.read() if child.stderr else ''}"
        )
        server_pid = int(line)
        assert _alive(server_pid)
        child.send_signal(sig)
        child.wait(10)
        assert child.returncode != 0
        gone_after = _wait_gone(server_pid, 5.0)
        print(f"{sig.name}: llama-server gone {gone_after:.2f} s after the parent died")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


_CHILD_CTRL_C_DURING_START = """
import sys
from pathlib import Path
from firstgate.runtime.models.local_server import LlamaServer

LlamaServer(Path(sys.argv[1]), binary=Path(sys.argv[2]), start_timeout=600, die_with_parent=False).start()
"""


def test_ctrl_c_during_start_stops_the_server(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    fake = _fake_binary(tmp_path, f'echo $$ > "{pid_file}"\nexec sleep 600\n')
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD_CTRL_C_DURING_START, str(model), str(fake)],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        deadline = time.monotonic() + 10
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert time.monotonic() < deadline, "fake server never started"
            time.sleep(0.05)
        server_pid = int(pid_file.read_text())
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=10)
        assert "KeyboardInterrupt" in stderr
        _wait_gone(server_pid, 2.0)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert os.path.exists(pid_file)
