"""9. Code node latency: a trivial python3 code node through the warm sandbox
pool (`sandbox/process_pool.py`), p50 and p99, against spawning a fresh
`python3` per call in the same run (the cost the pool exists to avoid).

    python -m bench.code_node [--gevent] [--calls 300] [--spawns 50]

Ours: `firstgate.nodes.code.run` (inputs, the job handed straight to a pre-forked,
already confined process, the result checked against the declared outputs).
Two figures: "warm", calls 20 ms apart, the latency of a code node when the
pool has its processes ready (the target applies here); and "back-to-back",
calls with no pause, where every call also waits its turn behind the
forking and reaping of the processes earlier calls used (each job gets a
fresh process), so it shows the pool's turnover, not a code node's latency.
Baseline: `subprocess.run([python3, "-I", "-c", <the same code + a JSON
print>])`, the shortest path a fresh interpreter per call can take (no
confinement at all).
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from firstgate.common.cancel import CancelToken  # noqa: E402
from firstgate.nodes import code  # noqa: E402
from firstgate.nodes.base import NodeContext  # noqa: E402
from firstgate.sandbox.process_pool import ProcessSandbox  # noqa: E402

from bench.common import header, line, ms, percentile, ratio  # noqa: E402

CODE = "def main(x: int) -> dict:\n    return {'y': x + 1}\n"
DATA = code.Data.model_validate(
    {
        "type": "code",
        "code_language": "python3",
        "code": CODE,
        "variables": [{"variable": "x", "value_selector": ["start", "x"]}],
        "outputs": {"y": {"type": "number", "children": None}},
    }
)
SPAWNED = CODE + "import json, sys\nprint(json.dumps(main(int(sys.argv[1]))))\n"


class _Pool:
    def get(self, selector: Any) -> Any:
        return 41


def through_pool(pool: ProcessSandbox, calls: int, pause_s: float = 0.0) -> list[float]:
    context = NodeContext(
        node_id="c", attempt=1, variables=_Pool(), cancel=CancelToken(), code_executor=pool
    )
    took = []
    for _ in range(calls):
        started = time.perf_counter()
        result = code.run(DATA, context)
        took.append(time.perf_counter() - started)
        assert result.outputs == {"y": 42}, result.outputs
        if pause_s:
            time.sleep(pause_s)
    return took


def fresh_interpreter(calls: int) -> list[float]:
    took = []
    for _ in range(calls):
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-I", "-c", SPAWNED, "41"], capture_output=True, check=True
        )
        took.append(time.perf_counter() - started)
        assert json.loads(out.stdout) == {"y": 42}
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--spawns", type=int, default=50)
    parser.add_argument("--gevent", action="store_true")
    args = parser.parse_args()
    header("9. code node latency")
    started = time.perf_counter()
    pool = ProcessSandbox()
    pool.start()
    line(
        f"pool of 2 workers ready in {ms(time.perf_counter() - started)} (once per process or run)"
    )
    try:
        through_pool(pool, 20, 0.02)  # warm-up
        warm = through_pool(pool, args.calls, 0.02)
        back_to_back = through_pool(pool, args.calls)
    finally:
        pool.close()
    fresh_interpreter(3)  # warm-up: the interpreter's files in the page cache
    base = fresh_interpreter(args.spawns)
    for name, ours in (("warm", warm), ("back-to-back", back_to_back)):
        for q in (50, 99):
            line(
                f"{name:12s} p{q}: pool {ms(percentile(ours, q))}; fresh python3 per call"
                f" {ms(percentile(base, q))}; ratio {ratio(percentile(ours, q), percentile(base, q))}"
            )
    line(f"target (warm): p50 <= 5 ms: {'met' if percentile(warm, 50) <= 0.005 else 'NOT met'}")


if __name__ == "__main__":
    main()
