"""The tests' PostgreSQL: the server `.ci/run` started (`FIRSTGATE_TEST_DATABASE_URL`),
else one started here for the session. Never skipped: a machine that cannot
start PostgreSQL fails these tests (`.ci/run` and `make test` install it)."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests import pg_cluster

ENV_URL = "FIRSTGATE_TEST_DATABASE_URL"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    given = os.environ.get(ENV_URL)
    if given:
        yield given
        return
    directory = tempfile.mkdtemp(prefix="firstgate-pg-")
    try:
        url = pg_cluster.start_cluster(directory)
    except Exception as exc:  # noqa: BLE001 - reported as a failure, never a skip
        pytest.fail(f"cannot start PostgreSQL for the tests: {exc}")
    try:
        yield url
    finally:
        pg_cluster.stop_cluster(directory)


@contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A new, empty database on `server`, dropped afterwards."""
    import pg8000.dbapi

    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = _connect(server)
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {name}")
    admin.close()
    parts = urlsplit(server)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        admin = _connect(server)
        admin.autocommit = True
        cursor = admin.cursor()
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        try:
            cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        except pg8000.dbapi.Error:
            pass  # a connection still closing; the server is thrown away at the end
        admin.close()


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the test server for one test."""
    with fresh_database(postgres_server) as url:
        yield url


def _connect(url: str):  # type: ignore[no-untyped-def]
    import pg8000.dbapi

    parts = urlsplit(url)
    return pg8000.dbapi.connect(
        user=parts.username or "postgres",
        password=parts.password,
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5432,
        database=parts.path.lstrip("/") or "postgres",
    )
