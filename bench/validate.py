"""7. Load and validate: a Dify-shaped chain of 1,000 / 10,000 / 100,000
template nodes (`bench.chain_dsl`), from the parsed document to a validated
`Workflow`, in µs per node of process CPU time (best of N).

Baseline, measured in the same run: graphon 0.8.0 (the engine Dify's own
runtime is built on) building the same document, its build validating the
graph as ours does (`bench/graphon_build.py`). graphon needs Python 3.12+;
its interpreter is set up once in ~/.cache/firstgate/bench-graphon with
graphon and only the packages its DSL importer loads (`--no-deps`: the full
set pulls in transformers and unstructured, which loading never touches).
Without Python 3.12 the graphon column says why and the growth figure stands
alone. Targets (issue 12): at most a quarter of graphon's time at every size;
no growth per node from 1,000 to 100,000.

Parsing is measured apart, on a 1.4 MB export (1,600 nodes): our reader
against PyYAML's libyaml loader and its pure-Python `safe_load`. A 100,000-node
export is 86 MB, over the reader's 10 MB limit (Dify's too), so the large
sizes start from the parsed mapping on both sides.

    python -m bench.validate [--sizes 1000,10000,100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from firstgate.common.yaml_reader import parse_yaml
from firstgate.nodes.templates.jinja import template_problem
from firstgate.runtime import load_workflow

from bench.chain_dsl import chain_document, chain_yaml
from bench.common import header, line

REPO = Path(__file__).resolve().parents[1]
GRAPHON_ENV = Path(
    os.environ.get("FIRSTGATE_BENCH_GRAPHON_ENV", Path.home() / ".cache/firstgate/bench-graphon")
)
GRAPHON_PACKAGES = [
    "graphon==0.8.0",
    # What `import graphon.dsl` needs, at the versions measured with.
    "pydantic>=2.7,<3",
    "pyyaml>=6",
    "httpx>=0.28,<0.29",
    "typing-extensions>=4.10",
    "charset-normalizer>=2.1",
    "jsonschema>=4.18",
    "orjson>=3",
    "json-repair>=0.55",
    "pydantic-extra-types>=2",
]
SHARE_TARGET = 0.25
GROWTH_TARGET = 1.5  # per-node time at the largest size over the smallest; noise allowed


def best_cpu(action: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        template_problem.cache_clear()  # every repeat checks its templates afresh
        started = time.process_time()
        action()
        best = min(best, time.process_time() - started)
    return best


def graphon_python() -> tuple[Path | None, str]:
    """graphon's interpreter, set up on first use; or None and the reason."""
    python = GRAPHON_ENV / "bin" / "python"
    stamp = GRAPHON_ENV / ".installed"
    if stamp.exists():
        return python, ""
    base = _python_312()
    if base is None:
        return None, "no Python 3.12 or 3.13 here (graphon 0.8.0 needs one)"
    steps = [
        [base, "-m", "venv", str(GRAPHON_ENV)],
        [str(python), "-m", "pip", "install", "-q", "--no-deps", *GRAPHON_PACKAGES],
        # The dependencies' own dependencies, resolved normally.
        [str(python), "-m", "pip", "install", "-q", *GRAPHON_PACKAGES[1:]],
        [str(python), "-c", "import graphon.dsl"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return None, f"setting up graphon failed: {' '.join(step[:4])}: {done.stderr[-300:]}"
    stamp.touch()
    return python, ""


def _python_312() -> str | None:
    """A Python 3.12 or 3.13 that runs (a pyenv shim may exist and refuse)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [shutil.which(name) for name in ("python3.12", "python3.13")]
    candidates += [str(p) for p in sorted(pyenv.glob("3.1[23]*/bin/python3"))]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import venv"], capture_output=True, check=False)
        if probe.returncode == 0:
            return candidate
    return None


def graphon_build(python: Path, nodes: int, repeat: int) -> float | str:
    done = subprocess.run(
        [str(python), str(REPO / "bench" / "graphon_build.py"), str(nodes), str(repeat)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return f"graphon failed: {done.stderr.strip().splitlines()[-1:]}"
    return float(json.loads(done.stdout.strip().splitlines()[-1])["cpu_s"])


def us(seconds: float, nodes: int) -> str:
    return f"{seconds / nodes * 1e6:8.1f}"


def parsing(nodes: int) -> None:
    text = chain_yaml(nodes)
    size = len(text.encode("utf-8")) / 1e6
    ours = best_cpu(lambda: parse_yaml(text, "chain.yml"), 3)
    with_libyaml = best_cpu(lambda: yaml.load(text, Loader=yaml.CSafeLoader), 3)
    pure = best_cpu(lambda: yaml.safe_load(text), 1)
    line(f"parsing a {size:.1f} MB export ({nodes:,} nodes), process CPU:")
    line(f"  firstgate reader (libyaml events, bounded) {ours:6.2f} s")
    line(
        f"  PyYAML CSafeLoader (baseline)              {with_libyaml:6.2f} s  ours {ours / with_libyaml:.2f}x"
    )
    line(f"  PyYAML safe_load, pure Python              {pure:6.2f} s  ours {ours / pure:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--parse-nodes", type=int, default=1600)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    header("7. load and validate a Dify-shaped chain, µs/node of process CPU (best of N)")
    python, why = graphon_python()
    if python is None:
        line(f"graphon baseline unavailable: {why}")
    line(f"{'nodes':>9}  {'ours':>8}  {'graphon 0.8.0':>13}  ours/graphon")
    per_node: list[float] = []
    graphon_per_node: list[float] = []
    failed = False
    for nodes in sizes:
        # Fewer repeats for the big sizes (graphon takes a minute per 100,000 nodes).
        repeat = (
            args.repeat if nodes <= 1000 else max(1, min(args.repeat, 3 if nodes <= 10_000 else 2))
        )
        document = chain_document(nodes)
        ours = best_cpu(lambda document=document: load_workflow(document), repeat)
        del document
        per_node.append(ours / nodes)
        baseline = graphon_build(python, nodes, repeat) if python else why
        if isinstance(baseline, float):
            graphon_per_node.append(baseline / nodes)
            share = ours / baseline
            verdict = "ok" if share <= SHARE_TARGET else "MISSED"
            failed |= share > SHARE_TARGET
            line(
                f"{nodes:>9,}  {us(ours, nodes)}  {us(baseline, nodes):>13}  "
                f"{share:.2f}x [{verdict}: target <= {SHARE_TARGET}x]"
            )
        else:
            line(f"{nodes:>9,}  {us(ours, nodes)}  {'n/a':>13}")
    growth = per_node[-1] / per_node[0]
    verdict = "ok" if growth <= GROWTH_TARGET else "MISSED"
    graphon_growth = (
        f" (graphon {graphon_per_node[-1] / graphon_per_node[0]:.2f}x)"
        if len(graphon_per_node) == len(sizes)
        else ""
    )
    line(
        f"per-node time, {sizes[-1]:,} vs {sizes[0]:,} nodes: ours {growth:.2f}x{graphon_growth} "
        f"[{verdict}: target <= {GROWTH_TARGET}x, i.e. no growth beyond noise]"
    )
    parsing(args.parse_nodes)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
