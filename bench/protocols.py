"""14. The wire protocols that name their own end (Anthropic, the Responses
API, Gemini, Ollama), each against its fake (`tests/fakes/*_api.py`) in a
child process:

- streaming throughput: content frames/s through `LLMClient.invoke_llm` in a
  gate vs raw httpx reading the same stream (`iter_lines`) and JSON-decoding
  every event (target >= 0.9x);
- first-token deadline lateness under the protocol's own keep-alive (Anthropic
  `ping`, Responses `response.in_progress`, Gemini SSE comments and empty
  chunks, Ollama empty chunks) every 100 ms: p99 of (time to the error - the
  budget) (target <= 20 ms).

    python -m bench.protocols [--gevent] [--frames 100000] [--rounds 3] [--trials 30]
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import httpx  # noqa: E402
from firstgate.plugin_daemon_client import LLMClient, first_token_gate  # noqa: E402
from firstgate.plugin_daemon_client.errors import FirstTokenTimeoutError  # noqa: E402
from firstgate.plugin_daemon_client.protocols import ChatCall  # noqa: E402

from bench.common import header, line, ms, percentile  # noqa: E402
from tests.fakes import dialects as sc  # noqa: E402
from tests.fakes.anthropic_api import ANTHROPIC  # noqa: E402
from tests.fakes.dialects import Dialect  # noqa: E402
from tests.fakes.gemini_api import GEMINI  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, SubprocessServer  # noqa: E402
from tests.fakes.ollama_api import OLLAMA  # noqa: E402
from tests.fakes.responses_api import RESPONSES  # noqa: E402

DIALECTS: dict[str, Dialect] = {d.kind: d for d in (ANTHROPIC, RESPONSES, GEMINI, OLLAMA)}
# Which dialect a request is for, by its path.
PATHS = {
    "/v1/messages": ANTHROPIC,
    "/v1/responses": RESPONSES,
    "/api/chat": OLLAMA,
    "/v1beta/": GEMINI,
}
BUDGET_S = 0.15
KEEPALIVE_S = 0.1
MESSAGES = [{"role": "user", "content": "firehose"}]
MODEL = "bench"


# --- the servers (child processes) --------------------------------------------


def _dialect_of(path: str) -> Dialect:
    return next(d for prefix, d in PATHS.items() if path.startswith(prefix))


def serve_firehose(frames: int) -> None:
    """Every request gets its protocol's whole reply of `frames` tokens at once."""
    bodies = {d.kind: sc.stream_of(d, frames, "tok ") for d in DIALECTS.values()}
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def serve(sock: socket.socket) -> None:
        with sock:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                head += chunk
            length = 0
            for row in head.split(b"\r\n"):
                if row.lower().startswith(b"content-length:"):
                    length = int(row.split(b":", 1)[1])
            body = head.partition(b"\r\n\r\n")[2]
            while len(body) < length:
                body += sock.recv(65536)
            path = head.split(b" ", 2)[1].decode()
            d = _dialect_of(path)
            sock.sendall(
                f"HTTP/1.1 200 OK\r\nContent-Type: {d.media_type}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            sock.sendall(bodies[d.kind])
            sock.shutdown(socket.SHUT_WR)

    def accept() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(sock,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    print(f"PORT {listener.getsockname()[1]}", flush=True)
    sys.stdin.read()


def serve_keepalives() -> None:
    """Every request gets its protocol's lifecycle events, then only keep-alives."""

    def choose(request: RecordedRequest) -> sc.Scenario:
        return sc.keepalives(_dialect_of(request.path), KEEPALIVE_S, duration=5.0)

    def run(conn: object) -> None:
        choose(conn.request)(conn)  # type: ignore[attr-defined]

    with FakeLLMServer(run) as server:
        print(f"PORT {server.port}", flush=True)
        sys.stdin.read()


# --- the measurements ------------------------------------------------------------


def gated(client: LLMClient) -> tuple[int, float]:
    start = time.perf_counter()
    with first_token_gate(
        first_token_timeout=30, idle_timeout=30, stream_total_timeout=600
    ) as gate:
        for _ in client.invoke_llm(MODEL, MESSAGES):
            pass
    return gate.progress.tokens, time.perf_counter() - start


def raw_httpx(client: httpx.Client, request: httpx.Request) -> tuple[int, float]:
    """Events JSON-decoded per second: what any client of the protocol must do."""
    count = 0
    start = time.perf_counter()
    response = client.send(request, stream=True)
    try:
        for text in response.iter_lines():
            if text.startswith("data:"):
                json.loads(text[5:])
                count += 1
            elif text.startswith("{"):  # NDJSON
                json.loads(text)
                count += 1
    finally:
        response.close()
    return count, time.perf_counter() - start


def throughput(root_url: str, d: Dialect, frames: int, rounds: int) -> None:
    client = LLMClient(d.kind, d.base_url(root_url), api_key="bench-key-0123456789")
    prepared = client.protocol.request(ChatCall(MODEL, MESSAGES))
    raw = httpx.Client(timeout=httpx.Timeout(600, connect=5))
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):  # interleaved, so machine noise hits both alike
        request = raw.build_request(
            "POST", prepared.url, headers=prepared.headers, json=prepared.body
        )
        n, took = raw_httpx(raw, request)
        theirs.append(frames / took)
        tokens, took = gated(client)
        assert tokens == frames, (d.kind, tokens)
        ours.append(tokens / took)
    client.close()
    raw.close()
    best, base = max(ours), max(theirs)
    verdict = "ok" if best >= 0.9 * base else "MISSED (target >= 0.9x)"
    line(
        f"{d.kind:17s} throughput: gate {best:,.0f} tokens/s, raw httpx+json {base:,.0f}"
        f" -> {best / base:.2f}x  [{verdict}]"
    )


def lateness(root_url: str, d: Dialect, trials: int) -> None:
    client = LLMClient(d.kind, d.base_url(root_url), api_key="bench-key-0123456789")
    late: list[float] = []
    for _ in range(trials + 1):
        start = time.perf_counter()
        try:
            with first_token_gate(first_token_timeout=BUDGET_S):
                for _ in client.invoke_llm(MODEL, MESSAGES):
                    pass
        except FirstTokenTimeoutError:
            late.append(time.perf_counter() - start - BUDGET_S)
        else:
            raise RuntimeError("the gate did not fire")
    late = late[1:]  # the first one warms the imports and the connection code
    client.close()
    p50, p99 = percentile(late, 50), percentile(late, 99)
    verdict = "ok" if p99 <= 0.020 else "MISSED (target p99 <= 20 ms)"
    line(
        f"{d.kind:17s} first-token lateness under keep-alives every "
        f"{KEEPALIVE_S * 1000:.0f} ms: p50 {ms(p50)}  p99 {ms(p99)}  [{verdict}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--gevent", action="store_true")
    parser.add_argument("--serve", choices=["firehose", "keepalives"])
    args = parser.parse_args()
    if args.serve == "firehose":
        return serve_firehose(args.frames)
    if args.serve == "keepalives":
        return serve_keepalives()
    header(
        f"14. wire protocols: throughput ({args.frames:,} tokens, best of {args.rounds}) and "
        f"first-token lateness (budget {BUDGET_S * 1000:.0f} ms, {args.trials} trials)"
    )
    with SubprocessServer(
        "--serve=firehose", f"--frames={args.frames}", module="bench.protocols"
    ) as server:
        for d in DIALECTS.values():
            throughput(server.root_url, d, args.frames, args.rounds)
    with SubprocessServer("--serve=keepalives", module="bench.protocols") as server:
        for d in DIALECTS.values():
            lateness(server.root_url, d, args.trials)


if __name__ == "__main__":
    main()
