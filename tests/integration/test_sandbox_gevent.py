"""The sandbox pool under gevent (run by tests/run_gevent.py): waiting for code
blocks only the waiting greenlet."""

from __future__ import annotations

import os
import time

import pytest

from tests.integration.sandbox_support import small_sandbox

pytestmark = pytest.mark.skipif(
    os.environ.get("FIRSTGATE_GEVENT") != "1", reason="gevent mode only"
)

SLEEPY = "import time\ndef main(tag: str):\n    began = time.time()\n    time.sleep(0.6)\n    return {'tag': tag, 'began': began, 'ended': time.time()}\n"


def test_other_greenlets_run_while_code_runs() -> None:
    import gevent

    with small_sandbox(workers=1) as pool:
        ticks: list[float] = []

        def ticker() -> None:
            while True:
                ticks.append(time.monotonic())
                gevent.sleep(0.01)

        background = gevent.spawn(ticker)
        gevent.sleep(0)
        began = time.monotonic()
        pool.execute("python3", SLEEPY, {"tag": "a"})
        ended = time.monotonic()
        background.kill()
    # A blocked hub would let the ticker run at most once during the job.
    assert sum(began < tick < ended for tick in ticks) >= 5


def test_jobs_from_two_greenlets_run_at_the_same_time() -> None:
    import gevent

    with small_sandbox(workers=2) as pool:
        jobs = [gevent.spawn(pool.execute, "python3", SLEEPY, {"tag": tag}) for tag in "ab"]
        gevent.joinall(jobs, raise_error=True)
        first, second = sorted((job.value for job in jobs), key=lambda r: r["began"])
    assert second["began"] < first["ended"]  # the second started before the first finished
