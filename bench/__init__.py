"""Benchmarks that back the speed claims; each prints its figures and the ratio to a
baseline measured in the same run. `python -m bench.run_all` runs them all."""
