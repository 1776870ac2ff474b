"""A real sandbox pool with small limits, for tests that exercise every limit quickly."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from firstgate.sandbox.process_pool import ProcessSandbox, ProcessSandboxConfig
from firstgate.sandbox.worker_process import SandboxLimits

SMALL = SandboxLimits(
    wall_s=3.0,
    cpu_s=1.0,
    memory_mb=128,
    file_size_mb=2,
    disk_mb=8,
    open_files=32,
    processes=16,
    output_bytes=256 * 1024,
)
# CI installs Node.js (.ci/run): there a missing one fails the JavaScript tests
# instead of skipping them.
# For tests that must hit the CPU limit: a wall clock far away, so that a loaded
# machine (where a CPU second can take several wall seconds) cannot race it.
CPU_BOUND = replace(SMALL, wall_s=60.0)
HAS_NODE = shutil.which("node") is not None or os.environ.get("CI") == "true"


@contextmanager
def small_sandbox(**overrides: object) -> Iterator[ProcessSandbox]:
    options: dict[str, object] = {"workers": 2, "limits": SMALL}
    options.update(overrides)
    pool = ProcessSandbox(ProcessSandboxConfig(**options))  # type: ignore[arg-type]
    try:
        pool.start()
        yield pool
    finally:
        pool.close()
