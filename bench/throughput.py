"""3. Streaming throughput: chunks/s through `LLMClient.invoke_llm` inside a gate
vs raw httpx `iter_lines` reading the same local SSE firehose.

    python -m bench.throughput [--gevent] [--frames 100000] [--rounds 3]
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import time  # noqa: E402

import httpx  # noqa: E402
from firstgate.plugin_daemon_client import LLMClient, first_token_gate  # noqa: E402

from bench.common import ServerProcess, header, line  # noqa: E402

MESSAGES = [{"role": "user", "content": "firehose"}]


def gated(client: LLMClient) -> tuple[int, int, float]:
    """(content frames delivered, chunks yielded, seconds). Frames that arrive in
    one socket read are delivered as one chunk, so frames/s is the comparable rate."""
    chunks = 0
    start = time.perf_counter()
    with first_token_gate(
        first_token_timeout=30, idle_timeout=30, stream_total_timeout=600
    ) as gate:
        for chunk in client.invoke_llm("m", MESSAGES):
            if chunk.text:
                chunks += 1
    return gate.progress.tokens, chunks, time.perf_counter() - start


def raw_httpx(client: httpx.Client, url: str) -> tuple[int, float]:
    count = 0
    body = {"model": "m", "stream": True, "messages": MESSAGES}
    start = time.perf_counter()
    with client.stream("POST", url, json=body) as response:
        for text in response.iter_lines():
            if text.startswith("data:") and text != "data: [DONE]":
                count += 1
    return count, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gevent", action="store_true")
    args = parser.parse_args()
    header(f"3. streaming throughput ({args.frames:,} frames, best of {args.rounds})")
    with ServerProcess("firehose", f"--frames={args.frames}") as server:
        client = LLMClient(base_url=server.base_url)
        raw = httpx.Client(timeout=httpx.Timeout(600, connect=5))
        url = f"{server.base_url}/chat/completions"
        ours: list[float] = []
        theirs: list[float] = []
        chunk_rates: list[float] = []
        for _ in range(args.rounds):  # interleaved, so machine noise hits both alike
            n, took = raw_httpx(raw, url)
            theirs.append(n / took)
            n_ours, n_chunks, took = gated(client)
            assert n_ours == args.frames, n_ours
            ours.append(n_ours / took)
            chunk_rates.append(n_chunks / took)
        client.close()
        raw.close()
    best_ours, best_raw = max(ours), max(theirs)
    verdict = "ok" if best_ours >= 0.9 * best_raw else "MISSED (target >= 0.9x)"
    line(f"raw httpx iter_lines (baseline): {best_raw:,.0f} frames/s")
    line(
        f"LLMClient.invoke_llm in a gate:  {best_ours:,.0f} frames/s decoded and delivered"
        f" (as {max(chunk_rates):,.0f} chunks/s: one chunk per socket read)"
    )
    line(f"ratio: {best_ours / best_raw:.2f}x raw httpx  [{verdict}]")


if __name__ == "__main__":
    main()
