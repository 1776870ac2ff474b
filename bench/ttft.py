"""6. TTFT overhead against the real local `llama-server`: the runtime's time to
first token (workflow.run() -> first NodeFirstToken event) minus a raw-socket
client's TTFT on the same prompt; median of >= 10 alternating runs.

    python -m bench.ttft [--gevent] [--runs 15]
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from firstgate.runtime import load_workflow  # noqa: E402
from firstgate.runtime.execution import events as ev  # noqa: E402
from firstgate.runtime.settings import RuntimeSettings  # noqa: E402
from firstgate.runtime.settings.providers import ProviderRoute  # noqa: E402

from bench.common import header, line, ms, one_llm_flow, percentile  # noqa: E402

PROMPT = "Name one colour."
PARAMS = {"temperature": 0, "max_tokens": 8, "seed": 1}


def raw_ttft(port: int) -> float:
    """A bare socket: send the request, note the first non-empty content delta,
    then read the reply to its end like the runtime does (with one slot, a reply
    abandoned mid-way would make the *next* request wait for the slot)."""
    body = json.dumps(
        {
            "model": "smollm2",
            "stream": True,
            "messages": [{"role": "user", "content": PROMPT}],
            **PARAMS,
        }
    ).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    first: float | None = None
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request)
        buffer = b""
        while True:
            data = sock.recv(65536)
            if not data:
                break
            if first is not None:
                continue
            buffer += data
            while b"\n" in buffer:
                row, buffer = buffer.split(b"\n", 1)
                if row.startswith(b"data: {"):
                    doc = json.loads(row[6:])
                    choices = doc.get("choices") or [{}]
                    if (choices[0].get("delta") or {}).get("content"):
                        first = time.perf_counter() - start
                        break
    if first is None:
        raise RuntimeError("no token")
    return first


def flow() -> dict[str, Any]:
    return one_llm_flow(
        "ttft",
        provider="llama",
        model="smollm2",
        first_token_timeout_ms=60000,
        completion_params=PARAMS,
    )


def runtime_ttft(workflow: Any, routes: RuntimeSettings) -> float:
    start = time.perf_counter()
    run = workflow.run({"query": PROMPT}, settings=routes)
    ttft = None
    for event in run:
        if ttft is None and isinstance(event, ev.NodeFirstToken):
            ttft = time.perf_counter() - start
    if ttft is None:
        raise RuntimeError(f"no token: {event}")
    return ttft


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--gevent", action="store_true")
    args = parser.parse_args()
    header(f"6. TTFT overhead vs a raw socket, real llama-server ({args.runs} runs each)")
    try:
        from firstgate.runtime.models.local_server import LlamaServer

        server = LlamaServer(ctx_size=2048, parallel=1)
        server.start()
    except Exception as exc:  # noqa: BLE001 - the benchmark is optional without the model
        line(f"skipped: {exc} (run `python -m firstgate.runtime.models.local_model fetch`)")
        return
    try:
        assert server.port is not None
        routes = RuntimeSettings(
            providers={"llama": ProviderRoute(kind="openai-compatible", base_url=server.base_url)}
        )
        workflow = load_workflow(flow())
        for _ in range(3):  # warm-up: prompt cache, connections, imports
            raw_ttft(server.port)
            runtime_ttft(workflow, routes)
        raw, ours = [], []
        for _ in range(args.runs):  # alternating, so drift hits both alike
            raw.append(raw_ttft(server.port))
            ours.append(runtime_ttft(workflow, routes))
    finally:
        server.stop()
    r50, o50 = percentile(raw, 50), percentile(ours, 50)
    # Each runtime run follows a raw run on the same warm server: the median of
    # the paired differences is less at the mercy of the server's own jitter.
    overhead = percentile([o - r for r, o in zip(raw, ours, strict=True)], 50)
    verdict = "ok" if overhead < 0.005 else "MISSED (target < 5 ms)"
    line(f"raw socket TTFT (baseline): median {ms(r50)}")
    line(
        f"runtime TTFT (workflow.run -> first NodeFirstToken): median {ms(o50)}  ({o50 / r50:.2f}x)"
    )
    line(f"overhead (median of paired differences): {ms(overhead)}  [{verdict}]")


if __name__ == "__main__":
    main()
