"""1. Deadline precision: how late the first-token timeout fires.

Cases: the server (a) withholds headers, (b) sends headers then silence,
(c) pings every 100 ms. Lateness = time from the call to the error, minus the
budget (so it also counts building the request: pessimistic). Baseline:
httpx's own read timeout set to the same budget; in case (c) it never fires.

    python -m bench.deadline [--gevent] [--trials 50]
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import time  # noqa: E402

import httpx  # noqa: E402
from firstgate.plugin_daemon_client import LLMClient, first_token_gate  # noqa: E402
from firstgate.plugin_daemon_client.errors import FirstTokenTimeoutError  # noqa: E402

from bench.common import ServerProcess, header, line, ms, percentile, ratio  # noqa: E402

BUDGET_S = 0.15
CASES = {"a": "WITHHOLD", "b": "SILENCE", "c": "PINGS"}
LABEL = {"a": "withholds headers", "b": "headers then silence", "c": "pings every 100 ms"}
NEVER_S = 2.0  # how long the baseline is given in case (c)


def gated_lateness(client: LLMClient, marker: str) -> float:
    messages = [{"role": "user", "content": marker}]
    start = time.perf_counter()
    try:
        with first_token_gate(first_token_timeout=BUDGET_S):
            for _ in client.invoke_llm("m", messages):
                pass
    except FirstTokenTimeoutError:
        return time.perf_counter() - start - BUDGET_S
    raise RuntimeError("the gate did not fire")


def httpx_lateness(client: httpx.Client, url: str, marker: str, cap: float) -> float | None:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": marker}]}
    start = time.perf_counter()
    try:
        with client.stream("POST", url, json=body) as response:
            for _ in response.iter_lines():
                if time.perf_counter() - start > cap:
                    return None  # never fired
    except httpx.ReadTimeout:
        return time.perf_counter() - start - BUDGET_S
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--gevent", action="store_true")
    args = parser.parse_args()
    header(f"1. deadline precision (budget {BUDGET_S * 1000:.0f} ms, {args.trials} trials)")
    with ServerProcess("scenarios") as server:
        client = LLMClient(base_url=server.base_url)
        raw = httpx.Client(timeout=httpx.Timeout(BUDGET_S, connect=5.0))
        url = f"{server.base_url}/chat/completions"
        gated_lateness(client, "WARMUP-SILENCE")
        for case, marker in CASES.items():
            late = [gated_lateness(client, marker) for _ in range(args.trials)]
            p50, p99 = percentile(late, 50), percentile(late, 99)
            verdict = "ok" if p99 <= 0.020 else "MISSED (target p99 <= 20 ms)"
            line(f"({case}) {LABEL[case]:22s} gate: p50 {ms(p50)}  p99 {ms(p99)}  [{verdict}]")
            if case == "c":
                fired = httpx_lateness(raw, url, marker, NEVER_S)
                if fired is None:
                    line(f"    baseline httpx read timeout: never fired within {NEVER_S:.0f} s")
                else:
                    line(f"    baseline httpx read timeout fired {ms(fired)} late (unexpected)")
                continue
            base = [httpx_lateness(raw, url, marker, 30.0) for _ in range(args.trials)]
            fired = [b for b in base if b is not None]
            b50, b99 = percentile(fired, 50), percentile(fired, 99)
            line(
                f"    baseline httpx read timeout: p50 {ms(b50)}  p99 {ms(b99)}"
                f"  (gate/baseline p99 {ratio(p99, b99)})"
            )
        client.close()
        raw.close()


if __name__ == "__main__":
    main()
