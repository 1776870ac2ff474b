"""The commands the project tells a new user to type: those in the header comment
of each example, and `make demo`'s. Read from the files, so that a test runs
exactly what they say."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def header_commands(path: Path) -> list[str]:
    """The shell commands in a file's leading comment: lines indented under `#`
    (`#   .venv/bin/firstgate run ...`), continuation lines (ending in `\\`) joined."""
    commands: list[str] = []
    pending = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line[1:]
        if not (pending or text.startswith("   ")) or not text.strip():
            continue
        text = text.strip()
        if text.endswith("\\"):
            pending += text[:-1].rstrip() + " "
            continue
        command = pending + text
        pending = ""
        if re.match(r"(\.venv/bin/|firstgate |sed )", command):
            commands.append(command)
    return commands


def demo_command() -> str:
    """The firstgate command of the Makefile's `demo` target, with `$(BIN)` as `.venv/bin`."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = lines.index(next(line for line in lines if line.startswith("demo:")))
    recipe = [line.strip() for line in lines[start + 1 :] if line.startswith("\t")]
    (command,) = [line for line in recipe if "firstgate run" in line]
    return command.replace("$(BIN)/", ".venv/bin/")


def run_args(command: str) -> list[str] | None:
    """The arguments after `firstgate run`, or None for another command."""
    words = shlex.split(command)
    for index, word in enumerate(words[:-1]):
        if word.endswith("firstgate") and words[index + 1] == "run":
            return words[index + 2 :]
    return None
