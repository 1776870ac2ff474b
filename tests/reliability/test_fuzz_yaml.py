"""Random alias structures and nested documents load within a fixed memory bound.

The generator and the measurement are in `yaml_fuzz.py`; it runs in a child
process limited to `ADDRESS_SPACE` bytes, so a reader that let an alias bomb
through dies there (and fails this test) instead of exhausting the machine.
Each example is read, written out in full as a run would (`json.dumps`, which
expands every alias) and loaded as a workflow; `tracemalloc` measures the peak
of each example, and the largest must stay under `PEAK_BOUND`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = 120
# Aliases may add at most about a megabyte (MAX_ALIAS_GROWTH); a document that
# reaches it writes out to a few megabytes of JSON. Measured peak: under 4 MiB.
PEAK_BOUND = 32 * 1024 * 1024
ADDRESS_SPACE = 2 * 1024**3


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@pytest.mark.slow
def test_hostile_yaml_stays_within_a_fixed_memory_bound() -> None:
    child = subprocess.run(
        [sys.executable, "-m", "tests.reliability.yaml_fuzz", "--examples", str(EXAMPLES)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=_limit_memory if os.name == "posix" else None,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"\nyaml fuzz: {result}")
    assert result["examples"] == EXAMPLES
    outcomes = result["outcomes"]
    # The generator reaches every kind of outcome: bombs, depth, and documents that load.
    assert outcomes.get("tooExpanded", 0) and outcomes.get("tooDeep", 0), outcomes
    assert outcomes.get("loaded", 0) + outcomes.get("invalid", 0), outcomes
    assert result["peak_bytes"] < PEAK_BOUND, result
