"""The examples do what their headers (and the README) say, on the embedded
SmolLM2-135M: each command is read from the example's header comment and run
as written, from the repository's root, with the embedded llama-server that
`firstgate run` starts for itself (never a server the test started).

Only two things differ from a user's terminal: the state database is the
test's own (a conversation `demo` starts fresh), and `/tmp/` in a command is
the test's temporary folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.example_commands import EXAMPLES, ROOT, demo_command, header_commands

MESSAGE = "Order 4512 arrived broken, the mug is cracked."


@pytest.fixture(autouse=True)
def _embedded_model(llama_binary: Path, model_file: Path) -> None:
    """The examples run on the embedded server: its binary and model must be there."""


def shell(command: str, tmp_path: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """One command as a user's shell runs it, from the repository's root."""
    venv_bin = Path(sys.executable).parent
    command = command.replace("/tmp/", f"{tmp_path}/")
    if not (ROOT / ".venv" / "bin").is_dir():  # the project's venv lives elsewhere
        command = command.replace(".venv/bin/", f"{venv_bin}/")
    env = {k: v for k, v in os.environ.items() if k != "FIRSTGATE_LOCAL_BASE_URL"}
    env.update(FIRSTGATE_STATE=str(tmp_path / "state.db"), LANG="C.UTF-8")
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def outputs(stdout: str) -> dict[str, Any]:
    """The `Outputs:` object the human view prints at the end of a run."""
    start = stdout.index("Outputs:\n") + len("Outputs:\n")
    found, _ = json.JSONDecoder().raw_decode(stdout[start:])
    return found


def commands(name: str) -> list[str]:
    found = header_commands(EXAMPLES / name)
    assert found, f"{name} says no command"
    return found


def test_support_triage_classifies_extracts_4512_and_answers(tmp_path: Path) -> None:
    (command,) = commands("support_triage.yml")
    assert MESSAGE in command
    done = shell(command, tmp_path)
    assert done.returncode == 0, done.stderr
    result = outputs(done.stdout)
    assert result["category"] == "A problem with an order or a delivery", result
    assert result["order_number"] == 4512, result
    assert result["extracted"] == 1
    assert "4512" in result["reply"] and "sorry" in result["reply"].lower(), result
    # It is the model that found the number: the extractor's answer, as the model wrote it.
    events = shell(command + " --json", tmp_path)
    (extract,) = [
        json.loads(line)["data"]
        for line in events.stdout.splitlines()
        if '"node_finished"' in line and '"node_id": "extract"' in line
    ]
    assert json.loads(extract["process_data"]["llm_text"]) == {"order_number": 4512}
    assert extract["process_data"]["usage"]["completion_tokens"] > 0


def test_support_triage_sends_a_greeting_to_the_other_branch(tmp_path: Path) -> None:
    (command,) = commands("support_triage.yml")
    done = shell(command.replace(MESSAGE, "Hello there!"), tmp_path)
    assert done.returncode == 0, done.stderr
    result = outputs(done.stdout)
    assert result["category"] == "Anything else", result
    assert "order_number" not in result and result["reply"].strip()


def test_retry_fail_branch_answers_as_it_is(tmp_path: Path) -> None:
    as_is = commands("retry_fail_branch.yml")[0]
    done = shell(as_is, tmp_path)
    assert done.returncode == 0, done.stderr
    answer = outputs(done.stdout)["answer"]
    assert answer.strip() and not answer.startswith("Sorry, the model did not answer"), answer
    assert "Run succeeded" in done.stdout


def test_retry_fail_branch_hint_shows_the_fail_branch(tmp_path: Path) -> None:
    """The header's instruction, exactly: a 1 ms budget, the probe off."""
    edit, run = commands("retry_fail_branch.yml")[1:]
    assert edit.startswith("sed ") and "--settings examples/settings/no-probe.yml" in run
    copied = shell(edit, tmp_path)
    assert copied.returncode == 0, copied.stderr
    assert "first_token_timeout_ms: 1 " in (tmp_path / "impatient.yml").read_text()
    done = shell(run, tmp_path)
    assert done.returncode == 0, done.stderr  # partially succeeded
    answer = outputs(done.stdout)["answer"]
    assert answer.startswith("Sorry, the model did not answer (FirstTokenTimeoutError):"), answer
    assert "No first token within 0.001 s" in answer
    assert done.stderr.count("[retrying Answer the question after attempt") == 2, done.stderr
    assert "Run partially succeeded" in done.stdout


def test_chat_memory_shows_the_memory_the_model_was_given(tmp_path: Path) -> None:
    first, second, shown = commands("chat_memory.yml")
    turn_one = shell(first, tmp_path)
    assert turn_one.returncode == 0, turn_one.stderr
    answer_one = outputs(turn_one.stdout)["answer"]
    assert answer_one.endswith("(turn 1)"), answer_one
    turn_two = shell(second, tmp_path)
    assert turn_two.returncode == 0, turn_two.stderr
    assert outputs(turn_two.stdout)["answer"].endswith("(turn 2)")
    # The third command: what the model got on turn 3, the memory of turns 1 and 2 first.
    done = shell(shown, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == 'node llm "Chat model" (llm):', done.stdout
    roles = [line.split(":", 1)[0].strip() for line in lines[1:] if not line.startswith(" " * 13)]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"], done.stdout
    assert lines[2] == "       user: My name is Ada."
    assert lines[3] == "  assistant: " + answer_one.splitlines()[0]
    assert lines[-1] == "       user: What is my name?"


@pytest.mark.parametrize("name", ["chat.yml", "if_else_template.yml"])
def test_the_other_examples_run_as_their_headers_say(name: str, tmp_path: Path) -> None:
    for command in commands(name):
        done = shell(command, tmp_path)
        assert done.returncode == 0, (command, done.stderr)
        assert "Run succeeded" in done.stdout, done.stdout


def test_make_demo_runs_the_chat_examples_command() -> None:
    # The same command as chat.yml's header (run above), so that the two never drift apart.
    assert demo_command() in commands("chat.yml")
