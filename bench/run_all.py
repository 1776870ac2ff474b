"""Run every benchmark, each in a fresh process, in threads and (where it applies)
under gevent; print each one's figures and its ratio to the baseline measured in
the same run.

    python -m bench.run_all [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from bench.common import machine

# (module, extra args, also under gevent?)
BENCHMARKS: list[tuple[str, list[str], bool]] = [
    ("bench.deadline", ["--trials=50"], True),
    ("bench.cancel", ["--trials=50"], True),
    ("bench.throughput", ["--frames=100000", "--rounds=3"], True),
    ("bench.long_prompt", ["--chars=600000", "--rounds=15"], True),
    ("bench.concurrency", ["--streams=1000", "--shards=16"], False),  # always gevent
    ("bench.engine", ["--repeat=5"], False),
    ("bench.ttft", ["--runs=31"], False),
    ("bench.http_request", ["--requests=500"], True),
    ("bench.knowledge", ["--docs=10000", "--queries=300"], False),
    ("bench.serve", ["--streams=1000", "--stops=200"], False),  # always gevent
    ("bench.distributed", ["--runs=1000", "--streams=1000", "--stops=200"], False),
    ("bench.code_node", ["--calls=300", "--spawns=50"], True),
    ("bench.template_render", ["--renders=20000", "--isolated=200"], False),
    ("bench.validate", ["--repeat=5"], False),
    ("bench.app_modes", ["--turns=200", "--repeat=5"], False),
    ("bench.protocols", ["--frames=100000", "--rounds=3", "--trials=30"], True),
    ("bench.checkpoint", ["--repeat=9", "--resumes=200", "--stops=100"], False),
    ("bench.human_input", ["--trials=200", "--http-trials=50", "--broker-trials=100"], False),
    ("bench.telemetry", ["--rounds=7"], True),
]
QUICK = {
    "bench.deadline": ["--trials=10"],
    "bench.cancel": ["--trials=10"],
    "bench.throughput": ["--frames=20000", "--rounds=1"],
    "bench.long_prompt": ["--rounds=3"],
    "bench.concurrency": ["--streams=200", "--shards=4"],
    "bench.engine": ["--repeat=1"],
    "bench.ttft": ["--runs=3"],
    "bench.http_request": ["--requests=50"],
    "bench.knowledge": ["--docs=500", "--queries=30"],
    "bench.serve": ["--streams=100", "--stops=40"],
    "bench.distributed": ["--latency-runs=20", "--runs=100", "--streams=100", "--stops=20"],
    "bench.code_node": ["--calls=30", "--spawns=5"],
    "bench.template_render": ["--renders=2000", "--isolated=20"],
    "bench.validate": ["--sizes=1000,10000", "--repeat=1", "--parse-nodes=400"],
    "bench.app_modes": ["--turns=20", "--repeat=1"],
    "bench.protocols": ["--frames=20000", "--rounds=1", "--trials=10"],
    "bench.checkpoint": ["--repeat=1", "--resumes=20", "--stops=20"],
    "bench.human_input": ["--trials=20", "--http-trials=5", "--broker-trials=5"],
    "bench.telemetry": ["--rounds=2", "--nodes=200"],
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    args = parser.parse_args()
    print("firstgate benchmarks: " + " ".join(sys.argv), flush=True)
    for key, value in machine().items():
        print(f"  {key}: {value}")
    failed = 0
    start = time.perf_counter()
    for module, extra, gevent_too in BENCHMARKS:
        extra = QUICK[module] if args.quick else extra
        for flags in [[]] + ([["--gevent"]] if gevent_too else []):
            result = subprocess.run([sys.executable, "-m", module, *extra, *flags], check=False)
            failed += result.returncode != 0
    print(f"\nall benchmarks done in {time.perf_counter() - start:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
