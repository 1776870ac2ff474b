"""`firstgate run` on a workflow with a human-input form, on real SQLite and
PostgreSQL stores: without a terminal it prints the token and exits 3 (paused),
the process is gone, and `firstgate resume TOKEN` in another process answers
the form and the run goes on under the same ids; a second resume is refused.
At a terminal (a real pseudo-terminal) `firstgate run` shows the form, asks
again after a rejected answer, and goes on in the same process."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_cli import firstgate
from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "human_input_workflow.yml"
EXIT_PAUSED = 3


@pytest.fixture(params=["sqlite", "postgres"])
def state(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    return request.getfixturevalue("postgres_url")


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_without_a_terminal_the_run_pauses_and_resume_goes_on_in_another_process(
    state: str, tmp_path: Path
) -> None:
    paused = firstgate("run", str(CORPUS), "--input", "topic=tea", "--state", state, "--json")
    assert paused.returncode == EXIT_PAUSED, paused.stderr
    events = _lines(paused.stdout)
    assert [e["event"] for e in events][-2:] == ["human_input_required", "workflow_paused"]
    token = events[-2]["data"]["form_token"]
    assert f"firstgate resume {token} --action ID" in paused.stderr
    attachment = tmp_path / "notes.md"
    attachment.write_text("# notes\n")
    # A wrong answer is refused naming what is missing; the form stays open.
    wrong = firstgate("resume", token, "--action", "approve", "--state", state)
    assert wrong.returncode == 2 and "priority, attachment, references" in wrong.stderr
    resumed = firstgate(
        "resume", token, "--action", "approve", "--state", state, "--json",
        "--input", "priority=medium", "--input", f"attachment=@{attachment}",
        "--input", f"references=@{attachment},@https://example.com/b.pdf",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    after = _lines(resumed.stdout)
    names = [e["event"] for e in after]
    assert names[:2] == ["workflow_started", "human_input_form_filled"], names
    assert after[0]["data"]["reason"] == "resumption"
    assert {e["workflow_run_id"] for e in after} == {events[0]["workflow_run_id"]}
    assert {e["task_id"] for e in after} == {events[0]["task_id"]}
    assert after[-1]["event"] == "workflow_finished"
    assert after[-1]["data"]["outputs"] == {"text": "A short note about tea.", "priority": "medium"}
    again = firstgate("resume", token, "--action", "reject", "--state", state)
    assert again.returncode == 2 and "already been submitted" in again.stderr
    forged = firstgate("resume", "not-a-token", "--action", "reject", "--state", state)
    assert forged.returncode == 2 and "Form not found" in forged.stderr


def _read_until(fd: int, pattern: str, seen: list[str], timeout: float = 60.0) -> str:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        text = "".join(seen)
        if re.search(pattern, text, re.S):
            return text
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen.append(os.read(fd, 4096).decode(errors="replace"))
            except OSError:
                break
    raise AssertionError(f"never saw {pattern!r} in {''.join(seen)!r}")


def test_at_a_terminal_the_form_is_asked_and_the_run_goes_on(tmp_path: Path) -> None:
    main, child = pty.openpty()
    env = {**os.environ, "LANG": "C", "TERM": "dumb"}
    command = [
        sys.executable, "-c",
        "import sys; from firstgate.runtime.cli.command import main; sys.exit(main())",
        "run", str(CORPUS), "--input", "topic=tea", "--state", str(tmp_path / "state.db"),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdin=child, stdout=child, stderr=child, close_fds=True
    )
    os.close(child)
    seen: list[str] = []
    attachment = tmp_path / "a.md"
    attachment.write_text("x")
    try:
        _read_until(main, r"edits \[A short note about tea\.\]: ", seen)
        shown = "".join(seen)
        assert "## Draft" in shown and "A short note about tea." in shown
        assert "Priority: [priority]" in shown  # an input's place, named
        os.write(main, b"\n")
        _read_until(main, r"priority: ", seen)
        os.write(main, b"9\n")  # not an option: asked again after the refusal
        _read_until(main, r"attachment \(@path\): ", seen)
        os.write(main, f"@{attachment}\n".encode())
        _read_until(main, r"references \(@path\): ", seen)
        os.write(main, f"@{attachment}\n".encode())
        _read_until(main, r"choose an action \(approve, apply_edit, reject\): ", seen)
        os.write(main, b"approve\n")
        _read_until(main, r"takes one of its options.*edits \[", seen)
        os.write(main, b"\n")
        _read_until(main, r"priority: .*priority: ", seen)
        os.write(main, b"3\n")
        _read_until(main, r"attachment \(@path\): .*attachment \(@path\): ", seen)
        os.write(main, f"@{attachment}\n".encode())
        _read_until(main, r"references \(@path\): .*references \(@path\): ", seen)
        os.write(main, f"@{attachment}\n".encode())
        _read_until(
            main, r"choose an action.*choose an action \(approve, apply_edit, reject\): ", seen
        )
        os.write(main, b"apply_edit\n")
        text = _read_until(main, r"Run succeeded", seen)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(main)
    assert '"action": "Use my edits"' in text
