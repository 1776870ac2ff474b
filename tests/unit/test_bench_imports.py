"""Every benchmark `make bench` runs can at least be imported: a module moved
under it (as `runtime.events` was) must fail here, not on the day someone runs
the benchmarks."""

from __future__ import annotations

import importlib

import pytest

from bench.run_all import BENCHMARKS


@pytest.mark.parametrize("module", sorted({name for name, _args, _gevent in BENCHMARKS}))
def test_each_benchmark_imports(module: str) -> None:
    loaded = importlib.import_module(module)
    assert callable(getattr(loaded, "main", None)), f"{module} has no main()"
