"""`firstgate worker` started as root prints no advice to use Celery's `--uid`
option (which `firstgate worker` does not take): the worker accepts JSON
messages only, so Celery's reason for the warning (pickle) does not hold, and
the warning is filtered where the worker starts. A real worker, Redis and
PostgreSQL."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.redis_support import redis_server, worker
from tests.serve_support import echo_model

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="Celery warns only when run as root")


def test_a_worker_started_as_root_gives_no_advice_it_cannot_follow(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    with (
        echo_model() as model,
        redis_server(tmp_path / "redis") as redis,
        worker(tmp_path, model, redis.url, postgres_url) as running,
    ):
        output = running.output()
    assert "ready" in output
    assert "superuser" not in output, output
    assert "--uid" not in output, output
    assert "SecurityWarning" not in output, output
