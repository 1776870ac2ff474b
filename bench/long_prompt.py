"""Sending a 600,000-character prompt: `LLMClient.invoke_llm` in a gate (the
request encoded and written under the first-token deadline, the reply read)
vs a raw httpx POST of the same body to the same local server, which reads
the whole request before it answers. Interleaved rounds; medians compared.

    python -m bench.long_prompt [--gevent] [--chars 600000] [--rounds 15]
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import httpx  # noqa: E402
from firstgate.plugin_daemon_client import LLMClient, first_token_gate  # noqa: E402

from bench.common import ServerProcess, header, line, ms  # noqa: E402

TARGET = 1.2


def prompt(chars: int) -> list[dict[str, str]]:
    # Prose-like text with some non-ASCII, as a long document would be.
    unit = "The quarterly report covers revenue, costs and the outlook — détaillé. "
    text = (unit * (chars // len(unit) + 1))[:chars]
    return [{"role": "user", "content": text}]


def gated(client: LLMClient, messages: list[dict[str, str]]) -> float:
    start = time.perf_counter()
    with first_token_gate(first_token_timeout=60, idle_timeout=30, stream_total_timeout=120):
        for _ in client.invoke_llm("m", messages):
            pass
    return time.perf_counter() - start


def raw_httpx(client: httpx.Client, url: str, messages: list[dict[str, str]]) -> float:
    body = {"model": "m", "stream": True, "messages": messages}
    start = time.perf_counter()
    with client.stream("POST", url, json=body) as response:
        for _ in response.iter_bytes():
            pass
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chars", type=int, default=600_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--gevent", action="store_true")
    args = parser.parse_args()
    header(f"long prompt: sending {args.chars:,} characters (median of {args.rounds})")
    messages = prompt(args.chars)
    with ServerProcess("firehose", "--frames=1") as server:
        client = LLMClient(base_url=server.base_url)
        raw = httpx.Client(timeout=httpx.Timeout(120, connect=5))
        url = f"{server.base_url}/chat/completions"
        gated(client, messages)  # warm both paths once
        raw_httpx(raw, url, messages)
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(args.rounds):  # interleaved, so machine noise hits both alike
            theirs.append(raw_httpx(raw, url, messages))
            ours.append(gated(client, messages))
        client.close()
        raw.close()
    mine, base = statistics.median(ours), statistics.median(theirs)
    verdict = "ok" if mine <= TARGET * base else f"MISSED (target <= {TARGET}x)"
    line(f"raw httpx POST of the same body (baseline): {ms(base)}")
    line(f"LLMClient.invoke_llm in a gate:             {ms(mine)}")
    line(f"ratio: {mine / base:.2f}x raw httpx  [{verdict}]")


if __name__ == "__main__":
    main()
