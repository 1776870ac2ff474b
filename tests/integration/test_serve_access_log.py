"""`firstgate serve` writes one access log line per request on stderr (method,
path, status, size, duration, app), never a key or a query string, and
`--no-access-log` turns it off. A real server process, real sockets."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serve_support import KEYS, Server, echo_model, serve

# `ADDR - - [TIME] "METHOD PATH PROTOCOL" STATUS SIZE SECONDS app=STEM`
LINE = re.compile(
    r"^(?P<client>\S+) - - \[(?P<time>\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000)\] "
    r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/1\.[01]" (?P<status>\d{3}) (?P<size>\d+|-) '
    r"(?P<seconds>\d+\.\d{3}) app=(?P<app>\S+)$"
)
SECRET_USER = "user-secret-7f3a"


@pytest.fixture(scope="module")
def model() -> Iterator[str]:
    with echo_model(interval=0.05) as base_url:
        yield base_url


def access_lines(server: Server, count: int, timeout: float = 10.0) -> list[re.Match[str]]:
    """The log's access lines, once there are `count` of them."""
    give_up = time.monotonic() + timeout
    while True:
        found = [m for m in map(LINE.match, server.output().splitlines()) if m]
        if len(found) >= count or time.monotonic() > give_up:
            return found
        time.sleep(0.05)


def test_each_request_is_logged_without_its_key_or_query(model: str, tmp_path: Path) -> None:
    with serve(tmp_path, model) as server:
        with server.key_client("chat") as chat:
            assert chat.get("/v1/parameters").status_code == 200
            streamed = chat.post(
                "/v1/chat-messages",
                json={
                    "inputs": {},
                    "query": "hello there",
                    "user": SECRET_USER,
                    "response_mode": "streaming",
                },
            )
            assert streamed.status_code == 200
            assert chat.get(f"/v1/conversations?user={SECRET_USER}&limit=5").status_code == 200
        with server.key_client("story") as story:
            story.headers["Authorization"] = "Bearer not-a-key-at-all"
            assert story.get("/v1/info").status_code == 401
        lines = access_lines(server, 4)
        log = server.output()
    assert [(m["method"], m["path"], m["status"], m["app"]) for m in lines] == [
        ("GET", "/v1/parameters", "200", "chat"),
        ("POST", "/v1/chat-messages", "200", "chat"),
        ("GET", "/v1/conversations", "200", "chat"),
        ("GET", "/v1/info", "401", "-"),
    ], log
    assert all(m["client"] == "127.0.0.1" for m in lines)
    # The stream's line is written when the stream ends: its duration covers every event.
    stream = lines[1]
    assert int(stream["size"]) == len(streamed.content)
    assert float(stream["seconds"]) >= 0.05, stream.group(0)
    for secret in (*KEYS.values(), "not-a-key-at-all", SECRET_USER, "limit="):
        assert secret not in log


def test_no_access_log_turns_it_off(model: str, tmp_path: Path) -> None:
    with serve(tmp_path, model, extra=("--no-access-log",)) as server:
        with server.key_client("chat") as chat:
            assert chat.get("/v1/parameters").status_code == 200
            assert chat.get("/v1/info").status_code == 200
        time.sleep(0.5)
        assert access_lines(server, 1, timeout=0.5) == []
