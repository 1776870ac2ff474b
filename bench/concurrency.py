"""4. Concurrency: 1,000 concurrent gated streams in one gevent process against a
local slow-streaming server (one frame every 100 ms for 2 s).

Ours: `LLMClient.invoke_llm` inside a gate, the streams sharded over
`--shards` clients (each pool sized for its share). Baseline: the same load
through raw httpx with one shared client. Each variant runs in a fresh
process; the figures are client CPU seconds, RSS growth per stream (peak while
all streams are open, minus the RSS before they start) and errors.

    python -m bench.concurrency [--streams 1000] [--shards 16]
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from bench.common import ServerProcess, line, ratio  # noqa: E402

FRAMES, INTERVAL_S = 20, 0.1
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * PAGE


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_variant(variant: str, url: str, streams: int, shards: int) -> dict[str, float]:
    import gevent
    import httpx
    from firstgate.plugin_daemon_client import LLMClient, first_token_gate
    from firstgate.plugin_daemon_client.errors import FirstGateError

    messages = [{"role": "user", "content": "slow"}]
    per_shard = math.ceil(streams / shards)
    if variant == "ours":
        limits = httpx.Limits(max_connections=per_shard + 8, max_keepalive_connections=0)
        clients = [LLMClient(base_url=url, limits=limits) for _ in range(shards)]
    else:
        limits = httpx.Limits(max_connections=streams + 8, max_keepalive_connections=0)
        raw = httpx.Client(limits=limits, timeout=httpx.Timeout(60, connect=30, pool=60))
    counts: list[int] = []
    errors: list[str] = []

    def ours(index: int) -> None:
        client = clients[index % shards]
        n = 0
        try:
            with first_token_gate(first_token_timeout=30, idle_timeout=10, stream_total_timeout=60):
                for chunk in client.invoke_llm("m", messages):
                    n += len(chunk.text)  # one "x" per frame; one read may carry several
        except FirstGateError as error:
            errors.append(type(error).__name__)
        counts.append(n)

    def baseline(_index: int) -> None:
        n = 0
        body = {"model": "m", "stream": True, "messages": messages}
        try:
            with raw.stream("POST", f"{url}/chat/completions", json=body) as response:
                for text in response.iter_lines():
                    if text.startswith("data:") and '"content":"' in text:
                        n += 1
        except Exception as error:  # noqa: BLE001 - counted
            errors.append(type(error).__name__)
        counts.append(n)

    worker = ours if variant == "ours" else baseline
    peak = [0]

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], rss())
            gevent.sleep(0.05)

    before_rss, before_cpu, start = rss(), cpu(), time.perf_counter()
    sampler = gevent.spawn(sample)
    gevent.joinall([gevent.spawn(worker, i) for i in range(streams)])
    wall, used = time.perf_counter() - start, cpu() - before_cpu
    sampler.kill()
    complete = sum(1 for n in counts if n == FRAMES)
    return {
        "streams": streams,
        "complete": complete,
        "errors": len(errors),
        "error_kinds": sorted(set(errors))[:5],  # type: ignore[dict-item]
        "cpu_s": used,
        "wall_s": wall,
        "rss_per_stream_kib": (peak[0] - before_rss) / streams / 1024,
    }


def spawn(variant: str, url: str, streams: int, shards: int) -> dict[str, float]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.concurrency",
            "--gevent",
            f"--variant={variant}",
            f"--url={url}",
            f"--streams={streams}",
            f"--shards={shards}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--variant", choices=["ours", "raw"])
    parser.add_argument("--url")
    parser.add_argument("--gevent", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.url, args.streams, args.shards)))
        return
    print(
        f"\n== 4. concurrency: {args.streams} streams in one gevent process each,"
        f" {FRAMES} frames at {INTERVAL_S * 1000:.0f} ms [gevent] ==",
        flush=True,
    )
    with ServerProcess("slow", f"--interval={INTERVAL_S}", f"--frames={FRAMES}") as server:
        raws, ourses = [], []
        for _ in range(args.rounds):  # alternating fresh processes; report the median by CPU
            raws.append(spawn("raw", server.base_url, args.streams, 1))
            ourses.append(spawn("ours", server.base_url, args.streams, args.shards))
    raw = sorted(raws, key=lambda r: r["cpu_s"])[len(raws) // 2]
    ours = sorted(ourses, key=lambda r: r["cpu_s"])[len(ourses) // 2]
    line(f"median of {args.rounds} rounds by CPU; every round:")
    for r_raw, r_ours in zip(raws, ourses, strict=True):
        line(f"  CPU raw {r_raw['cpu_s']:.2f} s, ours {r_ours['cpu_s']:.2f} s")
    for name, r in (
        ("baseline raw httpx, 1 shared client", raw),
        (f"ours, {args.shards} shards", ours),
    ):
        line(
            f"{name:36s} complete {r['complete']}/{r['streams']}  errors {r['errors']}"
            f" {r['error_kinds'] or ''}  CPU {r['cpu_s']:.2f} s  wall {r['wall_s']:.2f} s"
            f"  RSS {r['rss_per_stream_kib']:.1f} KiB/stream"
        )
    ok = (
        ours["complete"] == ours["streams"]
        and all(r["errors"] == 0 and r["complete"] == r["streams"] for r in ourses)
        and ours["cpu_s"] <= raw["cpu_s"]
        and ours["rss_per_stream_kib"] < 40
    )
    line(
        f"CPU ours/baseline {ratio(ours['cpu_s'], raw['cpu_s'])},"
        f" RSS ours/baseline {ratio(ours['rss_per_stream_kib'], raw['rss_per_stream_kib'])}"
        f"  [{'ok' if ok else 'MISSED (target CPU <= baseline, RSS < 40 KiB/stream, 0 errors)'}]"
    )


if __name__ == "__main__":
    main()
