"""Every command the examples' headers and `make demo` give passes a chatflow's
message the one way the README documents (`--query`), never `--input query=`,
and names a file that exists."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.example_commands import EXAMPLES, ROOT, demo_command, header_commands, run_args

FLOWS = sorted(EXAMPLES.glob("*.yml"))


def commands() -> list[tuple[str, str]]:
    found = [(path.name, command) for path in FLOWS for command in header_commands(path)]
    return [*found, ("Makefile demo", demo_command())]


def is_chatflow(flow: Path) -> bool:
    text = flow.read_text(encoding="utf-8")
    return yaml.safe_load(text)["app"]["mode"] == "advanced-chat"


def test_every_example_says_how_to_run_it() -> None:
    for path in FLOWS:
        assert any(run_args(c) for c in header_commands(path)), f"{path.name}: no command"


@pytest.mark.parametrize(("where", "command"), commands())
def test_a_chatflow_takes_its_message_with_query(where: str, command: str) -> None:
    args = run_args(command)
    if args is None:
        return
    flow = ROOT / args[0]
    if not flow.is_file():  # a copy the commands before made (the fail-branch hint)
        assert args[0].startswith("/tmp/"), f"{where}: {args[0]} does not exist"
        return
    inputs = [args[i + 1] for i, word in enumerate(args[:-1]) if word in ("--input", "-i")]
    assert not any(value.startswith("query=") for value in inputs), f"{where}: {command}"
    if is_chatflow(flow):
        assert "--query" in args, f"{where}: a chatflow's message goes with --query: {command}"
    else:
        assert "--query" not in args, f"{where}: --query is for chatflows: {command}"
