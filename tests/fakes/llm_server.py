"""A raw-socket fake model server for tests: real sockets, exact control of bytes and timing.

`FakeLLMServer([scenario, ...])` listens on 127.0.0.1 (port 0), serves each
connection in its own thread and hands request N the N-th scenario (the last
one repeats). It speaks both protocols: a request to `/v1/chat/completions`
gets OpenAI-compatible frames, a request to
`/plugin/{tenant}/dispatch/llm/invoke` gets the Dify plugin daemon envelope.

Framing is pinned per server (`framing="chunked"` or `"close"`), because the
reader's behaviour after a socket shutdown depends on it (DESIGN.md).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Scenario = Callable[["Conn"], None]


class _Stopped(Exception):
    pass


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float = field(default_factory=time.monotonic)

    def json(self) -> Any:
        return json.loads(self.body)


class Conn:
    """What a scenario uses to answer one request."""

    def __init__(
        self, sock: socket.socket, request: RecordedRequest, framing: str, stop: threading.Event
    ):
        self.sock = sock
        self.request = request
        self.framing = framing
        self._stop = stop
        self.protocol = "daemon" if "/dispatch/llm/invoke" in request.path else "openai"
        self.headers_sent = False

    # --- raw I/O -------------------------------------------------------------

    def sleep(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise _Stopped()

    def send_headers(
        self,
        status: int = 200,
        content_type: str = "text/event-stream",
        extra: dict[str, str] | None = None,
    ) -> None:
        reason = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            429: "Too Many Requests",
            500: "Internal Server Error",
            503: "Service Unavailable",
        }.get(status, "Status")
        lines = [
            f"HTTP/1.1 {status} {reason}",
            f"Content-Type: {content_type}",
            "Cache-Control: no-cache",
        ]
        if self.framing == "chunked":
            lines.append("Transfer-Encoding: chunked")
        lines.append("Connection: close")
        for key, value in (extra or {}).items():
            lines.append(f"{key}: {value}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.headers_sent = True

    def send(self, data: bytes) -> None:
        if not self.headers_sent:
            self.send_headers()
        if self.framing == "chunked":
            self.sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
        else:
            self.sock.sendall(data)

    def end(self) -> None:
        """End the body cleanly (last chunk, then close)."""
        if self.framing == "chunked":
            self.sock.sendall(b"0\r\n\r\n")
        self.close()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.sock.close()

    def reset(self) -> None:
        """Abort the connection with a TCP RST."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    # --- protocol frames -----------------------------------------------------

    def frame(self, doc: Any) -> None:
        self.send(b"data: " + json.dumps(doc).encode() + b"\n\n")

    def _daemon(
        self, content: str | None, finish: str | None = None, usage: dict | None = None
    ) -> dict:
        return {
            "code": 0,
            "message": "",
            "data": {
                "model": "fake",
                "prompt_messages": [],
                "system_fingerprint": None,
                "delta": {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "usage": usage,
                    "finish_reason": finish,
                },
            },
        }

    @staticmethod
    def _openai(delta: dict, finish: str | None = None) -> dict:
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "model": "fake",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    def role(self) -> None:
        if self.protocol == "openai":
            self.frame(self._openai({"role": "assistant", "content": None}))
        else:
            self.frame(self._daemon(None))

    def token(self, text: str) -> None:
        if self.protocol == "openai":
            self.frame(self._openai({"content": text}))
        else:
            self.frame(self._daemon(text))

    def ping(self) -> None:
        self.send(b": ping\n\n")

    def finish(self, reason: str = "stop", tokens: int = 0) -> None:
        usage = {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens}
        if self.protocol == "openai":
            self.frame(self._openai({}, finish=reason))
            self.frame({"id": "chatcmpl-fake", "choices": [], "usage": usage})
            self.send(b"data: [DONE]\n\n")
        else:
            self.frame(self._daemon("", finish=reason, usage=usage))


# --- scenarios ----------------------------------------------------------------


def tokens(texts: Sequence[str], interval: float = 0.0, role_first: bool = True) -> Scenario:
    def run(conn: Conn) -> None:
        conn.send_headers()
        if role_first:
            conn.role()
        for text in texts:
            if interval:
                conn.sleep(interval)
            conn.token(text)
        conn.finish(tokens=len(texts))
        conn.end()

    return run


def withhold_headers(seconds: float, then: Scenario | None = None) -> Scenario:
    """Send nothing at all for `seconds` (the plugin daemon's behaviour), then `then`."""

    def run(conn: Conn) -> None:
        conn.sleep(seconds)
        (then or tokens(["late"]))(conn)

    return run


def headers_then_silence(seconds: float = 30.0) -> Scenario:
    def run(conn: Conn) -> None:
        conn.send_headers()
        conn.sleep(seconds)
        conn.end()

    return run


def pings(interval: float, duration: float = 30.0, then_tokens: Sequence[str] = ()) -> Scenario:
    """Headers at once, then `: ping` comments every `interval` and no token (llama-server
    evaluating a long prompt with --sse-ping-interval), then optionally some tokens."""

    def run(conn: Conn) -> None:
        conn.send_headers()
        end = time.monotonic() + duration
        while time.monotonic() < end:
            conn.ping()
            conn.sleep(interval)
        if then_tokens:
            conn.role()
            for text in then_tokens:
                conn.token(text)
            conn.finish(tokens=len(then_tokens))
        conn.end()

    return run


def role_then_stall(seconds: float = 30.0) -> Scenario:
    def run(conn: Conn) -> None:
        conn.send_headers()
        conn.role()
        conn.sleep(seconds)
        conn.end()

    return run


def stall_after(n_tokens: int, seconds: float = 30.0, interval: float = 0.0) -> Scenario:
    def run(conn: Conn) -> None:
        conn.send_headers()
        conn.role()
        for i in range(n_tokens):
            if interval:
                conn.sleep(interval)
            conn.token(f"t{i} ")
        conn.sleep(seconds)
        conn.end()

    return run


def trickle(interval: float, duration: float = 30.0) -> Scenario:
    """One token, then a single byte (a blank SSE line) every `interval`: never idle, never done."""

    def run(conn: Conn) -> None:
        conn.send_headers()
        conn.role()
        conn.token("start ")
        end = time.monotonic() + duration
        while time.monotonic() < end:
            conn.sleep(interval)
            conn.send(b"\n")
        conn.end()

    return run


def close_before_token(after_headers: bool = True) -> Scenario:
    def run(conn: Conn) -> None:
        if after_headers:
            conn.send_headers()
            conn.role()
            conn.end()
        else:
            conn.close()

    return run


def reset(after_tokens: int = 0) -> Scenario:
    def run(conn: Conn) -> None:
        if after_tokens:
            conn.send_headers()
            for i in range(after_tokens):
                conn.token(f"t{i} ")
            conn.sleep(0.05)
        conn.reset()

    return run


def oversized_line(size: int) -> Scenario:
    def run(conn: Conn) -> None:
        conn.send_headers()
        conn.token("ok ")
        conn.send(b"data: " + b"x" * size)
        conn.send(b"\n\n")
        conn.end()

    return run


def malformed_json(payload: bytes = b'{"choices": [{"delta": {"content": "oops"') -> Scenario:
    def run(conn: Conn) -> None:
        conn.send_headers()
        conn.send(b"data: " + payload + b"\n\n")
        conn.end()

    return run


def not_sse(
    body: bytes = b'{"result": "not a stream"}', content_type: str = "application/json"
) -> Scenario:
    def run(conn: Conn) -> None:
        conn.send_headers(content_type=content_type)
        conn.send(body)
        conn.end()

    return run


def http_error(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Scenario:
    def run(conn: Conn) -> None:
        payload = (
            body
            if isinstance(body, bytes)
            else json.dumps(
                body
                if body is not None
                else {"error": {"message": f"fake error {status}", "code": status}}
            ).encode()
        )
        conn.send_headers(status=status, content_type="application/json", extra=headers)
        conn.send(payload)
        conn.end()

    return run


def dify_error(error_type: str, message: str, code: int = -500) -> Scenario:
    """A plugin daemon error envelope: PluginInvokeError wrapping the provider's error."""

    def run(conn: Conn) -> None:
        inner = json.dumps({"error_type": error_type, "message": message})
        outer = json.dumps({"error_type": "PluginInvokeError", "message": inner})
        conn.send_headers()
        conn.frame({"code": code, "message": outer, "data": None})
        conn.end()

    return run


# --- the server ---------------------------------------------------------------


class FakeLLMServer:
    def __init__(self, scenarios: Sequence[Scenario] | Scenario, framing: str = "chunked") -> None:
        self._scenarios = list(scenarios) if isinstance(scenarios, Sequence) else [scenarios]
        assert self._scenarios, "at least one scenario"
        assert framing in ("chunked", "close")
        self.framing = framing
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        # Set here, not in the accept thread: a server stopped at once closes the
        # listener before that thread runs.
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="fake-llm-accept", daemon=True
        )
        self.errors: list[BaseException] = []

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def __enter__(self) -> FakeLLMServer:
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            conns = list(self._conns)
        for sock in conns:
            try:
                sock.close()
            except OSError:
                pass
        self._acceptor.join(timeout=2)
        for thread in self._threads:
            thread.join(timeout=2)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(None)
            with self._lock:
                self._conns.append(sock)
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _read_request(self, sock: socket.socket) -> RecordedRequest | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return RecordedRequest(method, path, headers, body)

    def _serve(self, sock: socket.socket) -> None:
        try:
            request = self._read_request(sock)
            if request is None:
                return
            with self._lock:
                index = len(self.requests)
                self.requests.append(request)
            scenario = self._scenarios[min(index, len(self._scenarios) - 1)]
            scenario(Conn(sock, request, self.framing, self._stop))
        except (_Stopped, OSError):
            pass
        except BaseException as exc:  # surfaced to tests through .errors
            self.errors.append(exc)
        finally:
            try:
                sock.close()
            except OSError:
                pass


# --- hostile backends (appended for the reliability suite) ---------------------

# What each chaos kind does, and the typed error a client must report for it
# (None: the reply is complete and correct). `stall` is how long a stalling
# kind holds the connection; `frame_limit` is the client's max line length.
CHAOS_EXPECTED: dict[str, str | None] = {
    "ok": None,
    "ok_after_pings": None,
    "withhold_headers": "FirstTokenTimeoutError",
    "headers_then_silence": "FirstTokenTimeoutError",
    "pings_forever": "FirstTokenTimeoutError",
    "role_then_stall": "FirstTokenTimeoutError",
    "stall_mid_reply": "IdleTimeoutError",
    "trickle_forever": "StreamTotalTimeoutError",
    "reset_before_headers": "ConnectionLostError",
    "reset_mid_reply": "ConnectionLostError",
    "close_before_token": "EmptyResponseError",
    "malformed_frame": "MalformedFrameError",
    "oversized_frame": "FrameTooLargeError",
    "not_sse": "UnexpectedContentTypeError",
    "http_429_retry_after": "RateLimitError",
    "http_429": "RateLimitError",
    "http_500": "InvokeServerError",
    "http_503_retry_after": "ServerUnavailableError",
    "echo_credentials_401": "AuthorizationError",
    "echo_credentials_frame": "MalformedFrameError",
}
CHAOS_KINDS: tuple[str, ...] = tuple(CHAOS_EXPECTED)


def _credentials_of(request: RecordedRequest) -> str:
    """Everything that looks like a credential in the request: a hostile echo."""
    found = [
        request.headers.get("authorization", ""),
        request.headers.get("x-api-key", ""),
    ]
    return " ".join(value for value in found if value)


def echo_credentials(status: int = 401) -> Scenario:
    """An error body quoting the request's credentials back (a careless proxy)."""

    def run(conn: Conn) -> None:
        body = {"error": {"message": f"bad key: {_credentials_of(conn.request)}", "code": status}}
        http_error(status, body)(conn)

    return run


def echo_credentials_in_frame() -> Scenario:
    """A broken frame that quotes the request's credentials."""

    def run(conn: Conn) -> None:
        conn.send_headers()
        conn.send(b"data: {broken " + _credentials_of(conn.request).encode() + b"\n\n")
        conn.end()

    return run


def chaos_scenario(kind: str, *, stall: float = 2.0, frame_limit: int = 1 << 20) -> Scenario:
    """The scenario for one chaos kind (see CHAOS_EXPECTED)."""
    table: dict[str, Callable[[], Scenario]] = {
        "ok": lambda: tokens(["a", "b", "c"]),
        "ok_after_pings": lambda: pings(0.02, duration=0.05, then_tokens=["p", "q"]),
        "withhold_headers": lambda: withhold_headers(stall),
        "headers_then_silence": lambda: headers_then_silence(stall),
        "pings_forever": lambda: pings(0.03, duration=stall),
        "role_then_stall": lambda: role_then_stall(stall),
        "stall_mid_reply": lambda: stall_after(2, seconds=stall),
        "trickle_forever": lambda: trickle(0.03, duration=stall),
        "reset_before_headers": lambda: reset(0),
        "reset_mid_reply": lambda: reset(after_tokens=2),
        "close_before_token": lambda: close_before_token(),
        "malformed_frame": lambda: malformed_json(),
        "oversized_frame": lambda: oversized_line(frame_limit + 16),
        "not_sse": lambda: not_sse(),
        "http_429_retry_after": lambda: http_error(429, headers={"Retry-After": "1"}),
        "http_429": lambda: http_error(429),
        "http_500": lambda: http_error(500),
        "http_503_retry_after": lambda: http_error(503, headers={"Retry-After": "2"}),
        "echo_credentials_401": lambda: echo_credentials(401),
        "echo_credentials_frame": echo_credentials_in_frame,
    }
    return table[kind]()


class Chaos:
    """A seeded random hostile backend.

    Requests are grouped by `key(request)` (default: the request body, so the
    attempts of one workflow run that sends a unique prompt form one group);
    the n-th request of a group gets a kind drawn from
    `random.Random(f"{seed}:{key}:{n}")`, so the picks do not depend on thread
    scheduling. `picks[key]` lists the kinds served to that group, in order.
    """

    def __init__(
        self,
        seed: int,
        kinds: Sequence[str] = CHAOS_KINDS,
        *,
        weights: Sequence[float] | None = None,
        key: Callable[[RecordedRequest], str] | None = None,
        stall: float = 2.0,
        frame_limit: int = 1 << 20,
    ) -> None:
        self.seed = seed
        self.kinds = list(kinds)
        self.weights = list(weights) if weights is not None else None
        self.key = key or (lambda request: request.body.decode("utf-8", "replace"))
        self.stall = stall
        self.frame_limit = frame_limit
        self.picks: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def draw(self, group: str, n: int) -> str:
        """The kind served to the n-th request (from 0) of `group`: a pure function."""
        import random

        rng = random.Random(f"{self.seed}:{group}:{n}")
        return rng.choices(self.kinds, weights=self.weights)[0]

    def __call__(self, conn: Conn) -> None:
        group = self.key(conn.request)
        with self._lock:
            served = self.picks.setdefault(group, [])
            kind = self.draw(group, len(served))
            served.append(kind)
        chaos_scenario(kind, stall=self.stall, frame_limit=self.frame_limit)(conn)


def routed(choose: Callable[[RecordedRequest], Scenario]) -> Scenario:
    """Pick the scenario from the request itself (e.g. a marker in the prompt)."""

    def run(conn: Conn) -> None:
        choose(conn.request)(conn)

    return run


def key_by_regex(pattern: str) -> Callable[[RecordedRequest], str]:
    """Group requests by the first match of `pattern` in the body (the whole body if none)."""
    import re

    compiled = re.compile(pattern.encode())

    def key(request: RecordedRequest) -> str:
        found = compiled.search(request.body)
        return (found.group() if found else request.body).decode("utf-8", "replace")

    return key


def stall_marked(marker: str, stall: float, texts: Sequence[str], interval: float) -> Scenario:
    """Requests whose body holds `marker` get headers then silence; the rest stream `texts`."""
    healthy = tokens(texts, interval=interval)
    stalled = headers_then_silence(stall)
    return routed(lambda request: stalled if marker.encode() in request.body else healthy)


# --- a fake server in its own process -------------------------------------------
#
# In-process fake servers share the GIL with the client under test: under heavy
# parallel load the *server* falls behind and a healthy scenario looks stalled.
# Load and soak tests run the server in a child process instead.


class SubprocessServer:
    """`python -m MODULE ARGS` in a child process (by default this module); the
    child prints `PORT n` once it listens and exits when its stdin closes."""

    def __init__(self, *args: str, module: str = "tests.fakes.llm_server") -> None:
        self.args = list(args)
        self.module = module
        self.port = 0
        self._proc: Any = None

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return int(self._proc.pid)

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def __enter__(self) -> SubprocessServer:
        import os
        import subprocess
        import sys
        from pathlib import Path

        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", self.module, *self.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=root,
            env=env,
        )
        line = self._proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            self.__exit__()
            raise RuntimeError(f"{self.module} did not start: {line!r}")
        self.port = int(line.split()[1])
        return self

    def __exit__(self, *exc: object) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
            proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - make sure it is gone
            proc.kill()
            proc.wait(timeout=5)
        finally:
            proc.stdout.close()


def _main(argv: Sequence[str] | None = None) -> None:
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="serve one fake-model scenario until stdin closes")
    parser.add_argument("mode", choices=["chaos", "stall-marked"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stall", type=float, default=2.0)
    parser.add_argument("--ok-weight", type=float, default=1.0)
    parser.add_argument("--key-regex", default=r"run-\d+")
    parser.add_argument("--marker", default="STALL")
    parser.add_argument("--tokens", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.0)
    parser.add_argument("--framing", default="chunked")
    args = parser.parse_args(argv)
    scenario: Scenario
    if args.mode == "chaos":
        scenario = chaos_from_args(args.seed, args.ok_weight, args.stall, args.key_regex)
    else:
        texts = [f"w{i} " for i in range(args.tokens)]
        scenario = stall_marked(args.marker, args.stall, texts, args.interval)
    with FakeLLMServer(scenario, framing=args.framing) as server:
        server._listener.listen(4096)
        sys.stdout.write(f"PORT {server.port}\n")
        sys.stdout.flush()
        sys.stdin.read()  # until the parent closes it (or dies)


def chaos_from_args(seed: int, ok_weight: float, stall: float, key_regex: str) -> Chaos:
    """The Chaos a `chaos` subprocess serves; tests build the same one to replay its draws."""
    weights = [ok_weight if kind == "ok" else 1.0 for kind in CHAOS_KINDS]
    return Chaos(seed, weights=weights, key=key_by_regex(key_regex), stall=stall)


if __name__ == "__main__":
    _main()
