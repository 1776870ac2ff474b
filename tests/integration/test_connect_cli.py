"""Each node type that reaches the outside world, run through the CLI
(`firstgate run FLOW --models SETTINGS --json`) from the corpus files in
`tests/corpus/`, against the real-socket fakes: tool (built-in, plugin daemon,
MCP server, an OpenAPI operation, another workflow), http-request,
document-extractor, knowledge-retrieval."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from firstgate.common.problems import DslError
from firstgate.runtime import load_workflow

from tests import documents
from tests.connect_support import chain_flow
from tests.fakes import mcp_server
from tests.fakes.http_target import HttpTarget
from tests.fakes.plugin_daemon import FakePluginDaemon
from tests.run_events import finished_line

ROOT = Path(__file__).resolve().parents[2]
FLOWS = ROOT / "tests" / "flows"
CORPUS = ROOT / "tests" / "corpus"
CONNECT_FLOWS = [
    "tool_time_in_two_zones.yml",
    "tool_plugin_search_chat.yml",
    "tool_mcp_add_numbers.yml",
    "http_download_and_read.yml",
    "http_post_json_with_key.yml",
    "knowledge_search_local.yml",
    "knowledge_context_for_llm.yml",
]


def firstgate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from firstgate.runtime.cli.command import main; sys.exit(main())",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "LANG": "C", **(env or {})},
    )


def run_json(
    flow: Path | str, settings: dict[str, Any], tmp_path: Path, *inputs: str, **env: str
) -> tuple[int, list[dict[str, Any]], str]:
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(yaml.safe_dump(settings))
    args = ["run", str(flow), "--models", str(settings_file), "--json"]
    for item in inputs:
        args += ["--input", item]
    done = firstgate(*args, env=env)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events, done.stdout + done.stderr


def outputs(events: list[dict[str, Any]]) -> dict[str, Any]:
    finished = finished_line(events)
    assert finished["data"]["status"] == "succeeded", finished
    return finished["data"]["outputs"]


@pytest.mark.parametrize("name", CONNECT_FLOWS)
def test_corpus_exports_validate(name: str) -> None:
    workflow = load_workflow(CORPUS / name)
    assert workflow.graph.nodes


def test_a_database_tool_export_is_refused_by_name_through_the_cli() -> None:
    with pytest.raises(DslError) as caught:
        load_workflow(FLOWS / "tool_api_provider_refused.yml")
    assert len(caught.value.problems) == 1
    done = firstgate("validate", str(FLOWS / "tool_api_provider_refused.yml"))
    assert done.returncode == 2
    assert 'node weather "Weather lookup" (tool)' in done.stderr
    assert "Weather API is a Dify api tool" in done.stderr and "Traceback" not in done.stderr


def test_an_api_tool_runs_once_the_settings_define_it(target: HttpTarget, tmp_path: Path) -> None:
    flow = FLOWS / "tool_api_provider_refused.yml"
    document = {
        "openapi": "3.0.0",
        "servers": [{"url": target.url}],
        "paths": {
            "/echo/{city}": {
                "get": {
                    "operationId": "getForecast",
                    "parameters": [{"name": "city", "in": "path", "required": True}],
                }
            }
        },
    }
    (tmp_path / "weather.json").write_text(json.dumps(document))
    settings = {
        "tools": {
            "api_providers": {
                "7c2d0a41-5a1e-4d9b-9b7e-2f5c1e0d3a11": {"openapi": str(tmp_path / "weather.json")}
            }
        }
    }
    (tmp_path / "settings.yaml").write_text(yaml.safe_dump(settings))
    checked = firstgate("validate", str(flow), "--models", str(tmp_path / "settings.yaml"))
    assert checked.returncode == 0, checked.stderr
    code, events, text = run_json(flow, settings, tmp_path, "city=Oslo")
    assert code == 0, text
    assert json.loads(outputs(events)["forecast"])["path"] == "/echo/Oslo"


def test_a_workflow_tool_runs_once_the_settings_define_it(tmp_path: Path) -> None:
    inner = chain_flow(
        [("fmt", "template-transform", {
            "template": "{{ city }} in short",
            "variables": [{"variable": "city", "value_selector": ["start", "city"]}],
        })],
        {"summary": ["fmt", "output"]},
        start_variables=[{"variable": "city", "type": "text-input", "label": "city"}],
    )  # fmt: skip
    call = {
        "provider_id": "wf-brief",
        "provider_type": "workflow",
        "provider_name": "Brief",
        "tool_name": "brief",
        "tool_parameters": {"city": {"type": "mixed", "value": "{{#start.city#}}"}},
    }
    flow = chain_flow(
        [("call", "tool", call)],
        {"text": ["call", "text"]},
        start_variables=[{"variable": "city", "type": "text-input", "label": "city"}],
    )
    (tmp_path / "brief.yml").write_text(yaml.safe_dump(inner))
    (tmp_path / "outer.yml").write_text(yaml.safe_dump(flow))
    refused = firstgate("validate", str(tmp_path / "outer.yml"))
    assert refused.returncode == 2
    assert "Brief is a Dify workflow tool" in refused.stderr
    settings = {
        "tools": {"workflow_providers": {"wf-brief": {"file": str(tmp_path / "brief.yml")}}}
    }
    code, events, text = run_json(tmp_path / "outer.yml", settings, tmp_path, "city=Oslo")
    assert code == 0, text
    assert json.loads(outputs(events)["text"]) == {"summary": "Oslo in short"}


def test_builtin_time_tools_through_the_cli(tmp_path: Path) -> None:
    code, events, _ = run_json(CORPUS / "tool_time_in_two_zones.yml", {}, tmp_path)
    assert code == 0
    out = outputs(events)
    tokyo = datetime.strptime(out["tokyo"], "%Y-%m-%d %H:%M:%S").replace(
        tzinfo=ZoneInfo("Asia/Tokyo")
    )
    expected = tokyo.astimezone(ZoneInfo("Europe/Berlin")).strftime("%Y-%m-%d %H:%M:%S")
    assert out["berlin"] == expected
    assert abs((datetime.now(ZoneInfo("UTC")) - tokyo).total_seconds()) < 120


@pytest.fixture
def daemon() -> Iterator[FakePluginDaemon]:
    with FakePluginDaemon() as fake:
        yield fake


def test_a_plugin_tool_through_the_cli(daemon: FakePluginDaemon, tmp_path: Path) -> None:
    settings = {
        "tools": {
            "plugin_daemon": {
                "base_url": daemon.base_url,
                "tenant_id": "t-7",
                "api_key_env": "FG_CLI_DAEMON_KEY",
            }
        }
    }
    code, events, text = run_json(
        CORPUS / "tool_plugin_search_chat.yml",
        settings,
        tmp_path,
        "query=rivers",
        FG_CLI_DAEMON_KEY="cli-daemon-key-31",
    )
    assert code == 0, text
    answer = outputs(events)["answer"]
    assert answer.startswith("Found: 1 result for rivers (")
    # An array of objects in an answer is Dify's markdown list: "- " and each item.
    assert "- {'query': 'rivers'" in answer
    [request] = daemon.requests
    assert request["headers"]["X-Plugin-ID"] == "acme/search"
    assert request["body"]["data"]["tool_parameters"] == {
        "max_results": 3,
        "search_depth": "basic",
        "query": "rivers",
    }
    assert "cli-daemon-key-31" not in text


def test_an_mcp_tool_through_the_cli(tmp_path: Path) -> None:
    with mcp_server.running() as url:
        settings = {"tools": {"mcp_servers": {"calc-server": {"url": url}}}}
        code, events, text = run_json(
            CORPUS / "tool_mcp_add_numbers.yml", settings, tmp_path, "a=2", "b=40"
        )
    assert code == 0, text
    assert outputs(events) == {"sum": 42, "said": "42"}


@pytest.fixture
def target() -> Iterator[HttpTarget]:
    with HttpTarget() as server:
        yield server


def test_http_request_through_the_cli(target: HttpTarget, tmp_path: Path) -> None:
    document = yaml.safe_load((CORPUS / "http_post_json_with_key.yml").read_text())
    for variable in document["workflow"]["environment_variables"]:
        if variable["name"] == "API_BASE":
            variable["value"] = target.url
    flow = tmp_path / "post.yml"
    flow.write_text(yaml.safe_dump(document))
    settings = {"http_request": {"allow": [f"127.0.0.1:{target.port}"]}}
    code, events, text = run_json(flow, settings, tmp_path, "subject=printer on fire")
    assert code == 0, text
    out = outputs(events)
    assert out["status"] == 200
    echoed = json.loads(out["body"])
    assert echoed["method"] == "POST" and echoed["query"] == {"dry_run": ["true"]}
    # the optional number was not given: the body's hole is repaired, as Dify does
    assert json.loads(echoed["body"]) == {"subject": "printer on fire", "priority": "",
                                          "tags": ["web"]}  # fmt: skip
    # The key went to the server, which echoed it in its body; what the run
    # reports (inputs, process data, errors, outputs too) has it masked.
    assert target.requests[-1]["headers"]["authorization"] == "Bearer tok-not-a-real-secret-42"
    assert echoed["headers"]["authorization"] == "Bearer ***"
    assert "tok-not-a-real-secret-42" not in json.dumps(events)
    # the same flow without the allow-list: refused, handled by the fail branch
    code, events, text = run_json(flow, {}, tmp_path, "subject=x")
    assert code == 0, text
    finished = finished_line(events)
    assert finished["data"]["status"] == "partial-succeeded"
    assert finished["data"]["outputs"]["error_type"] == "AddressRefusedError"


def test_download_and_extract_through_the_cli(target: HttpTarget, tmp_path: Path) -> None:
    target.documents["memo.docx"] = (
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        documents.docx(["Memo: the office is closed on Friday."]),
    )
    settings = {
        "http_request": {"allow": ["127.0.0.1"]},
        "files": {"dir": str(tmp_path / "downloads")},
    }
    code, events, text = run_json(
        CORPUS / "http_download_and_read.yml",
        settings,
        tmp_path,
        f"url={target.url}/docs/memo.docx",
    )
    assert code == 0, text
    assert outputs(events) == {"text": ["Memo: the office is closed on Friday."], "status": 200}
    [saved] = list((tmp_path / "downloads").iterdir())
    assert saved.suffix == ".docx"


def test_uploaded_documents_through_the_cli(tmp_path: Path) -> None:
    contract = tmp_path / "contract.pdf"
    contract.write_bytes(documents.pdf(["Term: two years."]))
    annex = tmp_path / "annex.docx"
    annex.write_bytes(documents.docx(["Annex A: prices."]))
    flow = CORPUS / "document_extractor_uploads.yml"
    code, events, text = run_json(flow, {}, tmp_path, f"contract=@{contract}", f"annexes=@{annex}")
    assert code == 0, text
    assert outputs(events) == {"combined": "Term: two years.\n---\nAnnex A: prices."}
    # the optional list left out: its extractor's error strategy gives []
    code, events, text = run_json(flow, {}, tmp_path, f"contract=@{contract}")
    assert code == 0, text
    assert events[-1]["data"]["outputs"] == {"combined": "Term: two years.\n---\n"}
    # an encrypted contract: a typed error naming the file, exit 1, no traceback
    locked = tmp_path / "locked.pdf"
    locked.write_bytes(documents.pdf(["x"], password="pw"))
    code, events, text = run_json(flow, {}, tmp_path, f"contract=@{locked}")
    assert code == 1 and "locked.pdf is an encrypted PDF file" in text
    assert "Traceback" not in text


def test_knowledge_retrieval_through_the_cli(tmp_path: Path) -> None:
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "leave.md").write_text("Annual leave is 25 days, booked in the HR portal.")
    (folder / "travel.md").write_text("Travel is booked through the travel desk.")
    index = tmp_path / "handbook.sqlite"
    built = firstgate("index", str(folder), "--dataset", "b7f0e2c4-handbook", "--index", str(index))
    assert built.returncode == 0, built.stderr
    settings = {"knowledge": {"datasets": {"b7f0e2c4-handbook": {"kind": "local",
                                                                 "index": str(index)}}}}  # fmt: skip
    code, events, text = run_json(
        CORPUS / "knowledge_search_local.yml", settings, tmp_path, "question=how many leave days"
    )
    assert code == 0, text
    context = outputs(events)["context"]
    assert context.startswith("[leave.md] Annual leave is 25 days")
