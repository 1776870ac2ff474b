"""Shared helpers: statistics, output, machine facts, gevent switch."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from tests.fakes.llm_server import SubprocessServer

GEVENT_FLAG = "--gevent"


def patch_gevent_if_asked() -> bool:
    """Call first thing in a benchmark's __main__: patches before httpx is imported."""
    if GEVENT_FLAG not in sys.argv:
        return False
    import contextlib

    # httpcore imports trio when installed; trio needs select.epoll, which
    # patching removes. Importing it first is harmless (as in tests/run_gevent.py).
    with contextlib.suppress(ImportError):
        import trio  # noqa: F401
    from gevent import monkey

    monkey.patch_all()
    return True


def mode() -> str:
    try:
        from gevent import monkey

        return "gevent" if monkey.is_module_patched("socket") else "threads"
    except ImportError:
        return "threads"


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def ratio(value: float, baseline: float) -> str:
    if not baseline or math.isnan(baseline) or math.isnan(value):
        return "n/a"
    return f"{value / baseline:.2f}x"


def header(title: str) -> None:
    print(f"\n== {title} [{mode()}] ==", flush=True)


def line(text: str) -> None:
    print(f"  {text}", flush=True)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for row in info:
                if row.startswith("model name"):
                    return row.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def machine() -> dict[str, str]:
    import gevent
    import httpcore
    import httpx

    facts = {
        "nproc": str(os.cpu_count()),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "httpx": httpx.__version__,
        "httpcore": httpcore.__version__,
        "gevent": gevent.__version__,
    }
    try:
        facts["load average"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        pass
    try:
        from firstgate.runtime.models.local_model import find_llama_server

        out = subprocess.run(
            [str(find_llama_server()), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        text = (out.stdout + out.stderr).strip().splitlines()
        facts["llama-server"] = next((t for t in text if "version" in t), text[0] if text else "?")
    except Exception:  # noqa: BLE001 - optional
        facts["llama-server"] = "not found"
    return facts


class ServerProcess(SubprocessServer):
    """`python -m bench.servers MODE ARGS` in a child process; it prints `PORT n` and
    serves until its stdin closes."""

    def __init__(self, *args: str) -> None:
        super().__init__(*args, module="bench.servers")


def one_llm_flow(
    name: str,
    *,
    provider: str,
    model: str,
    first_token_timeout_ms: int,
    completion_params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An advanced-chat DSL document: start -> one LLM node answering sys.query."""
    llm = {
        "type": "llm",
        "title": "llm",
        "model": {
            "provider": provider,
            "name": model,
            "mode": "chat",
            "completion_params": completion_params or {},
        },
        "prompt_template": [{"role": "user", "text": "{{#sys.query#}}"}],
        "invocation": {"first_token_timeout_ms": first_token_timeout_ms},
    }
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": name, "mode": "advanced-chat"},
        "workflow": {
            "graph": {
                "nodes": [
                    {"id": "start", "data": {"type": "start", "title": "s", "variables": []}},
                    {"id": "llm", "data": llm},
                ],
                "edges": [{"source": "start", "target": "llm"}],
            }
        },
    }
