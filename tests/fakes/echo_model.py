"""An OpenAI-compatible streaming model server in its own process, for the serve
tests (the server under test and the client SDKs are processes too).

    python -m tests.fakes.echo_model [--interval 0.02]

prints `PORT n`, then answers every `/v1/chat/completions` request with the
words `echo: <the last user message>`, one word per frame, `--interval`
seconds apart. A message containing `[slow]` gets 200 words at 0.1 s (a run to
stop mid-stream), `[medium]` 20 words at 0.1 s, `[think]` 1.2 s of silence before its words, `[flaky]` a 503 every other time; `[count]` answers `turn N` with N the number of user
messages in the prompt (memory across turns), `[split]` an emoji split between
two frames (half a surrogate pair in each) and then a lone half. It serves until stdin closes.
gevent: a thousand streams at once cost a thousand greenlets.
"""

from __future__ import annotations

import argparse
import json
import sys


def _frame(text: str) -> bytes:
    doc = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return f"data: {json.dumps(doc)}\n\n".encode()


def _finish(tokens: int) -> bytes:
    doc = {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens},
    }
    return f"data: {json.dumps(doc)}\n\ndata: [DONE]\n\n".encode()


HEADERS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Connection: close\r\n\r\n"
)


def _read_request(sock) -> bytes:  # type: ignore[no-untyped-def]
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head.split(b" ", 2)[1] + b"\n" + body


def reply_words(request: dict) -> tuple[list[str], float | None]:
    """The words to stream, and an interval that overrides the server's (or None)."""
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    last = users[-1]["content"] if users else ""
    if isinstance(last, list):  # content parts (vision)
        last = " ".join(p.get("text", "") for p in last if isinstance(p, dict))
    if "[slow]" in last:
        return [f"w{n}" for n in range(200)], 0.1
    if "[think]" in last:
        return ["thought", " it", " over"], None
    if "[medium]" in last:
        return [f"m{n} " for n in range(20)], 0.1
    if "[count]" in last:
        return ["turn", f" {len(users)}"], None
    if "[split]" in last:  # one emoji split between two frames, then half of another
        return ["smile ", "\ud83d", "\ude00", " half \udfff"], None
    words = ["echo:"] + [f" {w}" for w in str(last).split()]
    return words, None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", type=float, default=0.02)
    args = parser.parse_args()

    from gevent import monkey

    monkey.patch_all()
    import gevent
    from gevent.server import StreamServer

    flaky_seen = [0]

    def handle(sock, _address) -> None:  # type: ignore[no-untyped-def]
        try:
            raw = _read_request(sock)
            path, _, body = raw.partition(b"\n")
            if not path.endswith(b"/chat/completions"):
                sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                return
            if b"[flaky]" in body:
                flaky_seen[0] += 1
                if flaky_seen[0] % 2:  # every other [flaky] request: the server is overloaded
                    sock.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
                    return
            request = json.loads(body or b"{}")
            words, interval = reply_words(request)
            sock.sendall(HEADERS)
            if "[think]" in json.dumps(request):
                gevent.sleep(1.2)  # a model busy with the prompt: headers, then silence
            for word in words:
                gevent.sleep(args.interval if interval is None else interval)
                sock.sendall(_frame(word))
            sock.sendall(_finish(len(words)))
        except (OSError, ValueError):
            pass
        finally:
            sock.close()

    server = StreamServer(("127.0.0.1", 0), handle, backlog=4096)
    server.start()
    sys.stdout.write(f"PORT {server.server_port}\n")
    sys.stdout.flush()
    gevent.get_hub().threadpool.spawn(sys.stdin.read).get()
    server.stop(timeout=1)


if __name__ == "__main__":
    main()
