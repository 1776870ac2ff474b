"""End-to-end fixtures: a real llama-server on a real loopback port.

Every test under tests/e2e/ is marked `e2e` (select with `-m e2e`, skip with
`-m "not e2e"`). `llama_server` is one server shared by the whole session:
SmolLM2-135M, `-c 4096`, `--parallel 2`, `--sse-ping-interval 1` where the
binary supports it, `--metrics` and `/slots` on. If FIRSTGATE_LOCAL_BASE_URL
is set, the fixture hands out that server instead and starts nothing.

Without the llama-server binary or the model, these tests skip with the
command that fixes it (`make setup` / `make model`); set
FIRSTGATE_E2E_REQUIRED=1 to make that a failure instead (CI).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from firstgate.runtime.models.local_model import LocalModelError, ensure_model, find_llama_server
from firstgate.runtime.models.local_server import LocalServer, local_server, server_supports

_E2E_DIR = Path(__file__).resolve().parent

E2E_CTX_SIZE = 4096
E2E_PARALLEL = 2
E2E_SSE_PING_INTERVAL = 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


def _unavailable(exc: Exception) -> NoReturn:
    message = f"e2e prerequisites missing: {exc}"
    if os.environ.get("FIRSTGATE_E2E_REQUIRED", "").strip() in ("1", "true", "yes"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def llama_binary() -> Path:
    """The llama-server binary (skips, or fails under FIRSTGATE_E2E_REQUIRED, if absent)."""
    try:
        return find_llama_server()
    except LocalModelError as exc:
        _unavailable(exc)


@pytest.fixture(scope="session")
def model_file() -> Path:
    """The cached SmolLM2 GGUF, fetched once if needed."""
    try:
        return ensure_model()
    except LocalModelError as exc:
        _unavailable(exc)


@pytest.fixture(scope="session")
def llama_server(request: pytest.FixtureRequest) -> Iterator[LocalServer]:
    """One real llama-server for the session (or the user's, via FIRSTGATE_LOCAL_BASE_URL).

    Has `.base_url` (".../v1", OpenAI-compatible) and `.root_url` (/health,
    /slots, /metrics).
    """
    if os.environ.get("FIRSTGATE_LOCAL_BASE_URL", "").strip():
        with local_server() as external:
            yield external
        return
    binary: Path = request.getfixturevalue("llama_binary")
    model: Path = request.getfixturevalue("model_file")
    ping = E2E_SSE_PING_INTERVAL if server_supports("--sse-ping-interval", binary) else None
    with local_server(
        model=model,
        binary=binary,
        ctx_size=E2E_CTX_SIZE,
        parallel=E2E_PARALLEL,
        sse_ping_interval=ping,
        start_timeout=120.0,
    ) as server:
        yield server
