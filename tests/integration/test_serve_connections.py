"""What a client connection may cost `firstgate serve` before it asks for
anything: a request line and headers dripped a byte at a time (slowloris) get
408 at the header timeout, a silent connection is closed at the keep-alive
timeout, and past `--max-connections` the server accepts nothing more until a
connection closes; none of it slows the requests of other clients."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.serve_support import Server, echo_model, serve

pytestmark = pytest.mark.slow


def _address(server: Server) -> tuple[str, int]:
    parts = urlsplit(server.url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def _read_until_closed(sock: socket.socket, limit_s: float) -> bytes:
    sock.settimeout(limit_s)
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return data
        data += chunk


def _one_response(sock: socket.socket) -> bytes:
    """One whole HTTP response (its head and its Content-Length of body)."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(4096)
    return head


def _parameters_ok(server: Server) -> bool:
    with server.key_client("chat") as client:
        return client.get("/v1/parameters").status_code == 200


def test_slow_headers_get_408_and_a_silent_connection_is_closed(tmp_path: Path) -> None:
    limits = ("--header-timeout", "1", "--keepalive-timeout", "2")
    with echo_model() as base, serve(tmp_path, base, extra=limits) as server:
        dripping = socket.create_connection(_address(server))
        silent = socket.create_connection(_address(server))
        started = time.monotonic()
        dripping.sendall(b"GET /v1/parameters HTTP/1.1\r\nHost: x\r\n")
        answer = b""
        # One header byte every 0.2 s: each arrives well within any read timeout.
        try:
            for byte in b"X-Slow: " + b"a" * 40:
                dripping.sendall(bytes([byte]))
                time.sleep(0.2)
        except OSError:
            pass  # closed by the server while still dripping, as it should be
        answer = _read_until_closed(dripping, 10)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert time.monotonic() - started < 8  # at the header timeout, not after the drip
        # Meanwhile other clients were served as usual.
        assert _parameters_ok(server)
        assert _read_until_closed(silent, 10) == b""  # closed at the keep-alive timeout
        dripping.close()
        silent.close()


def test_a_keep_alive_connection_serves_requests_then_closes_when_idle(tmp_path: Path) -> None:
    limits = ("--keepalive-timeout", "1")
    with echo_model() as base, serve(tmp_path, base, extra=limits) as server:
        sock = socket.create_connection(_address(server))
        request = b"GET /v1/info HTTP/1.1\r\nHost: x\r\n\r\n"
        for _ in range(2):  # two requests on the one connection, a pause between them
            sock.sendall(request)
            assert _one_response(sock).startswith(b"HTTP/1.1 401")  # no key: a small reply
            time.sleep(0.3)
        assert _read_until_closed(sock, 10) == b""
        sock.close()


def test_past_max_connections_nothing_more_is_accepted_until_one_closes(tmp_path: Path) -> None:
    limits = ("--max-connections", "2", "--keepalive-timeout", "60")
    with echo_model() as base, serve(tmp_path, base, extra=limits) as server:
        held = [socket.create_connection(_address(server)) for _ in range(2)]
        time.sleep(0.5)  # both are accepted and wait for a request
        waiting = subprocess.Popen(
            [sys.executable, "-c", f"import httpx; print(httpx.get('{server.url}/').status_code)"],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(2)
        assert waiting.poll() is None  # not answered while both places are taken
        held[0].close()
        out, _ = waiting.communicate(timeout=30)
        assert out.strip() == "200"
        held[1].close()


def test_bad_connection_settings_are_refused(tmp_path: Path) -> None:
    for flag, value in (("--max-connections", "0"), ("--header-timeout", "nan")):
        done = subprocess.run(
            [sys.executable, "-m", "firstgate.serve.cli", "serve", str(tmp_path), flag, value],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2
        assert flag in done.stderr and value in done.stderr


def test_a_files_url_with_credentials_is_refused_without_showing_them(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "firstgate.serve.cli",
            "serve",
            str(tmp_path),
            "--files-url",
            "https://files:hunter2@files.example/",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--files-url" in done.stderr and "files.example" in done.stderr
    assert "hunter2" not in done.stderr + done.stdout


def test_every_connection_sends_without_nagles_delay() -> None:
    """An answer goes out in small writes; with Nagle's algorithm on, each waits
    for the client's delayed ACK (about 40 ms): serve's handler turns it off."""
    from firstgate.serve.connection_limits import ConnectionLimits

    with socket.create_server(("127.0.0.1", 0)) as listener:
        with socket.create_connection(listener.getsockname()) as _client:
            accepted, address = listener.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
                ConnectionLimits().handler()(accepted, address, server=None)
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
