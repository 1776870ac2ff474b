"""`firstgate --help` lists every command, and `serve --help` / `worker --help`
show the defaults a new user would otherwise have to read the source for."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

# The console script pip installs (`firstgate = firstgate.serve.cli:main`), as a user runs it.
SCRIPT = Path(sys.executable).with_name("firstgate")


def firstgate(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "firstgate.serve.cli"]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def test_the_top_level_help_lists_every_command() -> None:
    result = firstgate("--help")
    assert result.returncode == 0, result.stderr
    assert "{run,resume,validate,index,runs,serve,worker}" in result.stdout
    for command in ("run", "resume", "validate", "index", "runs", "serve", "worker"):
        assert re.search(rf"^\s+{command}\s+\S", result.stdout, re.MULTILINE), result.stdout


def option_help(text: str, option: str) -> str:
    """The help of one option: its line and the indented lines after it."""
    match = re.search(rf"^  {re.escape(option)}\b.*?(?=^  -|\Z|^\S)", text, re.MULTILINE | re.S)
    assert match, f"{option} not in:\n{text}"
    return " ".join(match.group(0).split())


def test_serve_help_shows_the_defaults() -> None:
    result = firstgate("serve", "--help")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "(default: 127.0.0.1)" in option_help(out, "--host")
    assert "(default: 5001)" in option_help(out, "--port")
    assert "(default: 30)" in option_help(out, "--grace")
    assert "(default: firstgate)" in option_help(out, "--queue")
    assert "(default: 1200)" in option_help(out, "--time-limit")
    assert "(default: 3600)" in option_help(out, "--visibility-timeout")
    assert "(default: 30)" in option_help(out, "--lease")
    assert "state.db" in option_help(out, "--state")
    assert "llama-server" in option_help(out, "--models")


def test_worker_help_shows_the_defaults() -> None:
    result = firstgate("worker", "--help")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "(default: 1000)" in option_help(out, "--concurrency")
    assert "(default: firstgate)" in option_help(out, "--queue")
    assert "(default: 30)" in option_help(out, "--lease")
