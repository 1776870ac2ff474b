"""Baseline for `bench.validate`: graphon 0.8.0 building (and validating) the same
chain, run in graphon's own interpreter (it needs Python 3.12+).

`graphon.dsl.loads` parses YAML with PyYAML's pure-Python loader, then plans,
builds node objects and validates the graph. Parsing is measured separately
in `bench.validate`, so here it is taken out: the importer's `yaml.safe_load`
returns a copy of the already-parsed document, made before the clock starts.

    python bench/graphon_build.py NODES REPEAT   -> one JSON line {"cpu_s": best}
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import graphon.dsl as dsl  # noqa: E402
import graphon.dsl.importer as importer  # noqa: E402

from bench.chain_dsl import chain_document  # noqa: E402


class _Parsed:
    """Stands in for the `yaml` module inside graphon's importer."""

    YAMLError = Exception

    def __init__(self) -> None:
        self.next: dict[str, Any] = {}

    def safe_load(self, text: str) -> dict[str, Any]:
        return self.next


def main() -> int:
    nodes, repeat = int(sys.argv[1]), int(sys.argv[2])
    document = chain_document(nodes)
    parsed = _Parsed()
    importer.yaml = parsed  # type: ignore[assignment]
    best = float("inf")
    for _ in range(repeat):
        parsed.next = copy.deepcopy(document)
        started = time.process_time()
        engine = dsl.loads("(parsed)")
        best = min(best, time.process_time() - started)
        del engine
    print(json.dumps({"cpu_s": best}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
