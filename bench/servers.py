"""Model-server stand-ins for the benchmarks, each run in its own process.

    python -m bench.servers scenarios          # marker in the body picks the behaviour
    python -m bench.servers firehose --frames N
    python -m bench.servers slow --interval 0.1 --frames 20   (gevent: 1,000s of connections)

Each prints `PORT n` and serves until stdin closes.
"""

from __future__ import annotations

import argparse
import json
import sys


def _frame(text: str) -> bytes:
    doc = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "bench",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


def _finish(tokens: int) -> bytes:
    stop = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "model": "bench",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    usage = {
        "id": "chatcmpl-bench",
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens},
    }
    return (
        b"data: "
        + json.dumps(stop).encode()
        + b"\n\ndata: "
        + json.dumps(usage).encode()
        + b"\n\ndata: [DONE]\n\n"
    )


HEADERS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Connection: close\r\n\r\n"
)


def _read_request(sock: object) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)  # type: ignore[attr-defined]
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for row in head.split(b"\r\n")[1:]:
        key, _, value = row.partition(b":")
        if key.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)  # type: ignore[attr-defined]
        if not chunk:
            break
        body += chunk
    return body


def scenarios() -> None:
    from tests.fakes import llm_server as fake

    stall = 5.0
    table = {
        b"WITHHOLD": fake.withhold_headers(stall),
        b"SILENCE": fake.headers_then_silence(stall),
        b"PINGS": fake.pings(0.1, duration=stall),
    }
    healthy = fake.tokens(["a", "b", "c"])

    def choose(request: fake.RecordedRequest) -> fake.Scenario:
        for marker, scenario in table.items():
            if marker in request.body:
                return scenario
        return healthy

    with fake.FakeLLMServer(fake.routed(choose), framing="chunked") as server:
        server._listener.listen(1024)
        _announce(server.port)
        sys.stdin.read()


def firehose(frames: int) -> None:
    import socket
    import threading

    body = b"".join(_frame(f"t{i % 10}") for i in range(frames)) + _finish(frames)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def serve(sock: socket.socket) -> None:
        with sock:
            if _read_request(sock):
                sock.sendall(HEADERS)
                sock.sendall(body)
                sock.shutdown(socket.SHUT_WR)

    def accept() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(sock,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    _announce(listener.getsockname()[1])
    sys.stdin.read()


def slow(interval: float, frames: int) -> None:
    from gevent import monkey

    monkey.patch_all()
    import gevent
    from gevent.server import StreamServer

    frame = _frame("x")
    tail = _finish(frames)

    def handle(sock: object, _address: object) -> None:
        try:
            if not _read_request(sock):
                return
            sock.sendall(HEADERS)  # type: ignore[attr-defined]
            for _ in range(frames):
                gevent.sleep(interval)
                sock.sendall(frame)  # type: ignore[attr-defined]
            sock.sendall(tail)  # type: ignore[attr-defined]
        except OSError:
            pass
        finally:
            sock.close()  # type: ignore[attr-defined]

    server = StreamServer(("127.0.0.1", 0), handle, backlog=4096)
    server.start()
    _announce(server.server_port)
    gevent.get_hub().threadpool.spawn(sys.stdin.read).get()
    server.stop(timeout=1)


def _announce(port: int) -> None:
    sys.stdout.write(f"PORT {port}\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["scenarios", "firehose", "slow"])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args()
    if args.mode == "scenarios":
        scenarios()
    elif args.mode == "firehose":
        firehose(args.frames)
    else:
        slow(args.interval, args.frames)


if __name__ == "__main__":
    main()
