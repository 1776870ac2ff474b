"""Every shell block of the README runs as written, in a fresh copy of the
repository, on the embedded model: one test per README section, its blocks in
order, as a user would type them.

How a block is read: a block whose lines start with `$ ` is a transcript (the
`$ ` lines are the commands, the rest is what they print); any other block is
a script, run by bash with `-e -o pipefail`, each block in a shell of its own
(as in a new terminal: an `export` does not reach the next block). A marker
in an HTML comment on the line before a block (invisible on GitHub) says more:

- `<!-- server -->`: the block starts something that keeps running (serve,
  gunicorn, a worker, Redis). It runs in the background until it says it is
  ready, the section's next blocks talk to it, and it gets SIGTERM when the
  section ends.
- `<!-- not run: REASON -->`: an illustrative block; the reason says why it
  cannot run in a test. `NOT_RUN_LIMIT` keeps that list short.

What differs from a user's terminal, and only this (`SUBSTITUTIONS`): the
fixed ports (5001 serve's default, 6380 the README's Redis, PostgreSQL's
URL) become free ports and a database of the test's own, `/tmp/` and
`/var/lib/firstgate-redis` become folders of the test's own, and the state
database is the test's (`FIRSTGATE_STATE`). The model is the embedded
llama-server each command starts for itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.postgres_support import fresh_database, postgres_server  # noqa: F401 - fixture
from tests.redis_support import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SHELLS = ("sh", "bash", "shell", "console")
NOT_RUN_LIMIT = 3
# Commands that change the machine or the project's venv (which the clone shares):
# a block with one must be marked `not run`, never run by accident.
INSTALLS = re.compile(r"^\s*(make|apt-get|apt|pip|\.venv/bin/pip|sudo)\b", re.MULTILINE)
README_PG_URL = "postgresql://firstgate:firstgate@127.0.0.1:5432/firstgate"
# What a server prints once it takes requests: serve, gunicorn, a worker, Redis.
READY = re.compile(
    r"listening on http://|Listening at: http://|worker \S+ ready|Ready to accept connections"
)
CLIENT_TIMEOUT_S = 900  # a block's commands; the machine may be busy
READY_TIMEOUT_S = 180


@dataclass(frozen=True)
class Block:
    line: int  # where its fence is in the README, from 1
    section: str
    text: str
    marker: str  # "", "server" or "not run: ..."

    @property
    def script(self) -> str:
        lines = self.text.splitlines()
        if any(line.startswith("$ ") for line in lines):
            return "\n".join(line[2:] for line in lines if line.startswith("$ "))
        return self.text


def readme_blocks() -> list[Block]:
    found: list[Block] = []
    section = ""
    lines = README.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        elif line.startswith("```"):
            language = line[3:].strip()
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            if language in SHELLS:
                before = lines[index - 1].strip() if index else ""
                marker = ""
                if before.startswith("<!--") and before.endswith("-->"):
                    marker = before[4:-3].strip()
                text = "\n".join(lines[index + 1 : end])
                found.append(Block(index + 1, section, text, marker))
            index = end
        index += 1
    return found


BLOCKS = readme_blocks()
SECTIONS = list(dict.fromkeys(b.section for b in BLOCKS if not b.marker.startswith("not run")))


def test_every_shell_block_runs_or_says_why_not() -> None:
    for block in BLOCKS:
        assert block.marker in ("", "server") or block.marker.startswith("not run: "), block
        if not block.marker.startswith("not run"):
            assert not INSTALLS.search(block.script), f"README line {block.line}: mark it not run"
    not_run = [b for b in BLOCKS if b.marker.startswith("not run")]
    assert len(not_run) <= NOT_RUN_LIMIT, [b.line for b in not_run]
    for block in not_run:
        assert len(block.marker) > 30, f"README line {block.line}: say why it is not run"
    assert len(SECTIONS) >= 8, SECTIONS


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory, llama_binary: Path, model_file: Path) -> Path:
    """The repository's files as a fresh clone has them, with the project's venv."""
    where = tmp_path_factory.mktemp("clone") / "firstgate"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, where / name)
    venv = ROOT / ".venv" if (ROOT / ".venv" / "bin").is_dir() else Path(sys.prefix)
    (where / ".venv").symlink_to(venv)
    return where


class Section:
    """The blocks of one README section, run in order in the clone."""

    def __init__(self, name: str, clone: Path, scratch: Path, database: str | None) -> None:
        self.name = name
        self.clone = clone
        self.scratch = scratch
        self.substitutions = {
            "5001": str(free_port()),
            "6380": str(free_port()),
            "/var/lib/firstgate-redis": str(scratch / "redis"),
            "/tmp/": f"{scratch}/",
        }
        if database is not None:
            self.substitutions[README_PG_URL] = database
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("FIRSTGATE_APP_KEY_") and k != "FIRSTGATE_LOCAL_BASE_URL"
        }
        self.env.update(FIRSTGATE_STATE=str(scratch / "state.db"), LANG="C.UTF-8")
        self.servers: list[tuple[subprocess.Popen[bytes], Path, Block]] = []

    def script(self, block: Block) -> str:
        text = block.script
        for written, used in self.substitutions.items():
            text = text.replace(written, used)
        return text

    def run(self, block: Block) -> None:
        assert not INSTALLS.search(block.script), f"README line {block.line}: mark it not run"
        if block.marker == "server":
            self.start(block)
            return
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", self.script(block)],
            cwd=self.clone,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=CLIENT_TIMEOUT_S,
            check=False,
        )
        where = f"README line {block.line} exited {done.returncode}"
        assert done.returncode == 0, f"{where}:\n{block.text}\n{done.stdout}\n{done.stderr}"
        assert_no_error_reply(done.stdout, where)
        for process, log, server in self.servers:  # the servers it talked to are still up
            assert process.poll() is None, f"README line {server.line} died:\n{log.read_text()}"

    def start(self, block: Block) -> None:
        log = self.scratch / f"server-{block.line}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                ["bash", "-e", "-o", "pipefail", "-c", self.script(block)],
                cwd=self.clone,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped as one below
            )
        self.servers.append((process, log, block))
        give_up = time.monotonic() + READY_TIMEOUT_S
        while not READY.search(log.read_text(errors="replace")):
            assert process.poll() is None, f"README line {block.line} exited:\n{log.read_text()}"
            assert time.monotonic() < give_up, f"README line {block.line}:\n{log.read_text()}"
            time.sleep(0.1)

    def stop(self) -> None:
        for process, _, _ in reversed(self.servers):  # the last started first
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def assert_no_error_reply(output: str, where: str) -> None:
    """A `curl` whose reply is Dify's error body (`{code, message, status}`) failed."""
    for line in output.splitlines():
        text = line.removeprefix("data: ").strip()
        if not text.startswith("{"):
            continue
        try:
            reply = json.loads(text)
        except ValueError:
            continue
        assert not {"code", "message", "status"} <= set(reply), f"{where}: {reply}"
        assert reply.get("event") != "error", f"{where}: {reply}"
        # A run's end: a blocking reply (no event), or the stream's workflow_finished.
        if reply.get("event", "workflow_finished") == "workflow_finished" and "data" in reply:
            status = reply["data"].get("status")
            assert status in ("succeeded", "partial-succeeded"), f"{where}: {reply}"


@pytest.fixture
def database(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """A PostgreSQL database for the sections that name one, empty for each."""
    section = request.node.callspec.params["section"]
    if not any(b.section == section and README_PG_URL in b.text for b in BLOCKS):
        yield None
        return
    server = request.getfixturevalue("postgres_server")
    with fresh_database(server) as url:
        yield url


@pytest.mark.parametrize("section", SECTIONS)
def test_the_readme_section_runs_as_written(
    section: str, clone: Path, tmp_path: Path, database: str | None
) -> None:
    runner = Section(section, clone, tmp_path, database)
    try:
        for block in BLOCKS:
            if block.section == section and not block.marker.startswith("not run"):
                runner.run(block)
    finally:
        runner.stop()
