"""Suite-wide: runs record into a state database of the test session, never the user's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def _session_state_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("state") / "state.db"
    previous = os.environ.get("FIRSTGATE_STATE")
    os.environ["FIRSTGATE_STATE"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("FIRSTGATE_STATE", None)
    else:
        os.environ["FIRSTGATE_STATE"] = previous


@pytest.fixture(scope="session")
def phoenix() -> Iterator[object]:
    """A real OTLP backend (Arize Phoenix), started once per test session."""
    from tests.phoenix_support import phoenix_server

    with phoenix_server() as server:
        yield server
