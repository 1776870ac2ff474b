"""Ctrl-C during a run aborts it: in-flight streams are cancelled and the run reports its end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fakes import llm_server as fake
from tests.integration.test_cli import EXAMPLES, ROOT, models_file
from tests.run_events import finished_line


def start_cli(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "LANG": "C"}
    env.pop("FIRSTGATE_LOCAL_BASE_URL", None)
    return subprocess.Popen(
        [sys.executable, "-m", "firstgate.runtime.cli.command", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A background CI job inherits SIGINT ignored; a user's terminal does not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_ctrl_c_aborts_the_run_and_reports_it(tmp_path: Path) -> None:
    with fake.FakeLLMServer(fake.pings(0.1, 20)) as server:
        models = models_file(tmp_path, server, probe="off")
        proc = start_cli(
            "run",
            str(EXAMPLES / "chat.yml"),
            "--input",
            "query=hi",
            "--models",
            str(models),
            "--json",
        )
        deadline = time.monotonic() + 20
        while not server.requests:  # the LLM request is in flight
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        time.sleep(0.3)
        interrupted = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
        took = time.monotonic() - interrupted
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert took < 1.0
    assert proc.returncode == 1
    assert "Traceback" not in err
    stopped = [
        e for e in events if e["event"] == "node_finished" and e["data"]["status"] == "stopped"
    ]
    assert stopped and stopped[0]["data"]["error_type"] == "StreamCancelledError"
    done = finished_line(events)
    assert done["data"]["status"] == "stopped"
    assert done["data"]["error"] == "interrupted"
    assert events[-1]["event"] == "message_end"  # a stopped turn still ends its message
