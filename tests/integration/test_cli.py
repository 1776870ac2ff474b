"""`firstgate` as a subprocess: exit codes, --json lines, human output, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from firstgate import locales
from tests.fakes import llm_server as fake
from tests.run_events import finished_line

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def firstgate(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "LANG": "C", **(env or {})}
    full_env.pop("FIRSTGATE_LOCAL_BASE_URL", None)
    full_env.pop("LC_ALL", None)
    full_env.pop("LC_MESSAGES", None)
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from firstgate.runtime.cli.command import main; sys.exit(main())",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=full_env,
    )


def models_file(tmp_path: Path, server: fake.FakeLLMServer, **route: Any) -> Path:
    path = tmp_path / "models.yaml"
    spec = {"kind": "openai-compatible", "base_url": server.base_url, **route}
    path.write_text(
        yaml.safe_dump({"providers": {"fake": spec}, "default": "fake"}), encoding="utf-8"
    )
    return path


def lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_run_json_streams_events_and_exits_0(tmp_path: Path) -> None:
    with fake.FakeLLMServer(fake.tokens(["Red, ", "orange, ", "yellow."], interval=0.01)) as server:
        result = firstgate(
            "run",
            str(EXAMPLES / "chat.yml"),
            "--input",
            "query=Colours?",
            "--models",
            str(models_file(tmp_path, server)),
            "--json",
        )
        body = server.requests[0].json()
    assert result.returncode == 0, result.stderr
    events = lines(result.stdout)
    assert events[0]["event"] == "workflow_started"
    assert [e["event"] for e in events[-2:]] == ["workflow_finished", "message_end"]
    assert events[-2]["data"]["status"] == "succeeded"
    assert events[-2]["data"]["outputs"] == {"answer": "Red, orange, yellow."}
    # A chatflow's text is Dify's `message` events, each token once.
    chunks = [e for e in events if e["event"] == "message"]
    assert [c["answer"] for c in chunks] == ["Red, ", "orange, ", "yellow."]
    assert all(c["from_variable_selector"] == ["llm", "text"] for c in chunks)
    assert len({e["conversation_id"] for e in events}) == 1
    assert body["messages"][-1] == {"role": "user", "content": "Colours?"}
    assert result.stderr == ""


def test_run_human_output_streams_answer_then_stats(tmp_path: Path) -> None:
    with fake.FakeLLMServer(fake.tokens(["Hel", "lo"], interval=0.01)) as server:
        result = firstgate(
            "run",
            str(EXAMPLES / "chat.yml"),
            "-i",
            "query=hi",
            "--models",
            str(models_file(tmp_path, server)),
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Hello\n")
    assert "Outputs:" in result.stdout
    assert "Time to first token:" in result.stdout
    assert "Tokens per second:" in result.stdout
    assert result.stdout.rstrip().endswith("Run succeeded")


def test_fail_branch_example_exits_0_partial(tmp_path: Path) -> None:
    with fake.FakeLLMServer(fake.close_before_token()) as server:
        result = firstgate(
            "run",
            str(EXAMPLES / "retry_fail_branch.yml"),
            "--input",
            "question=why?",
            "--models",
            str(models_file(tmp_path, server)),
            "--json",
            timeout=60,
        )
        assert len(server.requests) == 3
    events = lines(result.stdout)
    assert result.returncode == 0
    assert [e["event"] for e in events].count("node_retry") == 2
    done = finished_line(events)
    assert done["data"]["status"] == "partial-succeeded"
    assert done["data"]["outputs"]["answer"].startswith(
        "Sorry, the model did not answer (EmptyResponseError)"
    )


def test_failed_run_exits_1_with_localized_error(tmp_path: Path) -> None:
    with fake.FakeLLMServer(fake.http_error(503, {"error": {"message": "down"}})) as server:
        result = firstgate(
            "run",
            str(EXAMPLES / "chat.yml"),
            "--input",
            "query=hi",
            "--models",
            str(models_file(tmp_path, server)),
            "--locale",
            "de-DE",
        )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    # The status line and the transport's error, both rendered through message keys in de-DE.
    prefix = locales.t("cli.status.failed", "de-DE", error="")
    cause = locales.t("errors.invoke.serverUnavailable", "de-DE", detail="")
    assert prefix != locales.t("cli.status.failed", "en-US", error="")
    assert prefix + cause in result.stdout


def test_invalid_inputs_exit_2_without_traceback(tmp_path: Path) -> None:
    missing = firstgate("run", str(EXAMPLES / "retry_fail_branch.yml"))
    assert missing.returncode == 2
    assert 'Invalid input: input "question" is required' in missing.stderr
    malformed = firstgate("run", str(EXAMPLES / "chat.yml"), "--input", "novalue")
    assert malformed.returncode == 2
    assert "--input expects KEY=VALUE" in malformed.stderr
    unset_key = tmp_path / "models.yaml"
    unset_key.write_text(
        yaml.safe_dump(
            {
                "providers": {
                    "p": {
                        "kind": "openai-compatible",
                        "base_url": "http://x/v1",
                        "api_key_env": "FG_TEST_UNSET_KEY",
                    }
                },
                "default": "p",
            }
        )
    )
    no_key = firstgate(
        "run", str(EXAMPLES / "chat.yml"), "-i", "query=hi", "--models", str(unset_key), "--json"
    )
    assert no_key.returncode == 2
    (line,) = lines(no_key.stdout)
    assert (line["event"], line["status"], line["code"]) == ("error", 400, "invalid_param")
    assert "FG_TEST_UNSET_KEY" in line["message"]
    for result in (missing, malformed, no_key):
        assert "Traceback" not in result.stderr + result.stdout


def test_validate_prints_all_problems_and_exits_2(tmp_path: Path) -> None:
    doc = yaml.safe_load((EXAMPLES / "chat.yml").read_text())
    doc["workflow"]["graph"]["nodes"][1]["data"]["retry_config"] = {"max_retries": "three"}
    doc["workflow"]["graph"]["nodes"].append(
        {"id": "k", "data": {"type": "knowledge-index", "title": "KB"}}
    )
    doc["workflow"]["graph"]["edges"].append({"source": "answer", "target": "ghost"})
    flow = tmp_path / "bad.yml"
    flow.write_text(yaml.safe_dump(doc))
    result = firstgate("validate", str(flow))
    assert result.returncode == 2
    assert f"{flow} has 3 problem(s):" in result.stderr
    assert (
        'node llm "Chat model" (llm): retry_config.max_retries must be an integer between 0 and 10, got "three"'
        in result.stderr
    )
    assert (
        'node k "KB" (knowledge-index): node type "knowledge-index" is not supported yet'
        in result.stderr
    )
    assert "connects node ghost, which does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_examples_and_missing_or_broken_files(tmp_path: Path) -> None:
    for example in sorted(EXAMPLES.glob("*.yml")):
        result = firstgate("validate", str(example))
        assert result.returncode == 0, result.stderr
        assert "is valid" in result.stdout
    missing = firstgate("validate", str(tmp_path / "nope.yml"))
    assert missing.returncode == 2 and "file not found" in missing.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text("kind: app\napp: {mode: workflow\n")
    bad_yaml = firstgate("run", str(broken))
    assert bad_yaml.returncode == 2 and "not valid YAML" in bad_yaml.stderr
    assert "Traceback" not in missing.stderr + bad_yaml.stderr
