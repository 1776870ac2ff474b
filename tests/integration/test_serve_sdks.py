"""Both of Dify's Python client SDKs, unchanged and pinned, against a real
`firstgate serve` process (SQLite store) and a fake model server process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.serve_support import KEYS, Server, echo_model, run_sdk, serve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with echo_model() as base_url, serve(tmp_path_factory.mktemp("serve"), base_url) as running:
        yield running


def _typed(scenario: str, server: Server, app: str) -> dict:
    return run_sdk("dify-client-python", "typed_client.py", scenario, server.url, KEYS[app])


def _official(scenario: str, server: Server, app: str) -> dict:
    return run_sdk("dify-client", "official_client.py", scenario, server.url, KEYS[app])


# ---- dify-client-python 1.0.3: its pydantic models parse every reply and event


def test_typed_blocking_workflow_run(server: Server) -> None:
    seen = _typed("workflow_blocking", server, "story")
    assert seen["status"] == "succeeded"
    assert seen["outputs"]["text"] == "echo: a red fox"


def test_typed_streaming_workflow_run_parses_every_event(server: Server) -> None:
    seen = _typed("workflow_streaming", server, "story")
    assert seen["text"].strip() == "echo: a blue whale"
    assert seen["status"] == "succeeded"
    kinds = seen["kinds"]
    assert kinds[0] == "WorkflowsStreamResponse:workflow_started"
    assert kinds[-1] == "WorkflowsStreamResponse:workflow_finished"
    assert "TextChunkStreamResponse:text_chunk" in kinds
    assert kinds.count("WorkflowsStreamResponse:node_finished") == 3


def test_typed_chat_over_three_turns_in_one_conversation(server: Server) -> None:
    seen = _typed("chat_turns", server, "chat")
    # The model counts the user messages it was given: memory carried the turns.
    assert seen["answers"] == ["turn 1", "turn 2", "turn 3"]
    assert seen["conversation_id"]


def test_typed_stop_mid_stream(server: Server) -> None:
    seen = _typed("chat_stop", server, "chat")
    assert seen["tail"] == ["node_finished", "workflow_finished", "message_end"]
    assert seen["status"] == ["stopped"]
    assert seen["stop_to_end_s"] < 1.0


def test_typed_stop_of_a_workflow_run_is_recorded_as_stopped(server: Server) -> None:
    seen = _typed("workflow_stop", server, "story")
    assert seen["tail"] == ["node_finished", "workflow_finished"]
    assert seen["status"] == "stopped"
    assert seen["stop_to_end_s"] < 1.0
    with server.key_client("story") as http:
        record = http.get(f"/v1/workflows/run/{seen['workflow_run_id']}").json()
    assert record["status"] == "stopped"
    assert record["outputs"] == {} or "text" not in record["outputs"] or record["outputs"]


def test_typed_file_upload_then_a_run_that_uses_it(server: Server) -> None:
    seen = _typed("upload_and_run", server, "story")
    assert seen["upload"]["name"] == "notes.txt" and seen["upload"]["size"] == 18
    assert seen["upload"]["extension"] == "txt" and seen["upload"]["mime_type"] == "text/plain"
    assert seen["status"] == "succeeded"
    document = seen["outputs"]["doc"]
    assert document["filename"] == "notes.txt" and document["size"] == 18
    assert document["related_id"] == seen["upload"]["id"]
    # Its url is a signed link to this server that serves the file, not a server path.
    assert document["url"].startswith(
        server.url + "/files/" + seen["upload"]["id"] + "/file-preview?"
    )
    assert httpx.get(document["url"]).content == b"remember the milk\n"
    forged = document["url"].replace("sign=", "sign=x")
    assert httpx.get(forged).status_code == 403


def test_typed_wrong_key_is_the_sdks_error(server: Server) -> None:
    seen = _typed("bad_key", server, "story")
    assert seen == {"error": "DifyAPIError", "status": 401, "code": "unauthorized"}


# ---- dify-client 0.1.10, Dify's official SDK


def test_official_parameters(server: Server) -> None:
    seen = _official("parameters", server, "story")
    form = seen["user_input_form"]
    assert [next(iter(entry)) for entry in form] == ["text-input", "file"]
    assert form[0]["text-input"]["variable"] == "topic" and form[0]["text-input"]["required"]
    assert seen["system_parameters"]["file_size_limit"] == 15
    assert seen["file_upload"]["image"]["enabled"] is False


def test_official_chat_over_three_turns_then_its_messages(server: Server) -> None:
    seen = _official("chat_turns", server, "chat")
    assert seen["answers"] == ["turn 1", "turn 2", "turn 3"]
    assert [m[1] for m in seen["messages"]] == ["turn 1", "turn 2", "turn 3"]
    assert seen["conversation_id"] in seen["conversations"]


def test_official_blocking_and_streaming_workflow_runs(server: Server) -> None:
    seen = _official("workflow_runs", server, "story")
    assert seen["blocking"]["text"] == "echo: a red fox"
    assert seen["streamed_text"].strip() == "echo: a grey heron"
    assert seen["last"] == "workflow_finished"


def test_official_stop_mid_stream(server: Server) -> None:
    seen = _official("chat_stop", server, "chat")
    assert seen["tail"] == ["node_finished", "workflow_finished", "message_end"]
    assert seen["status"] == ["stopped"]
    assert seen["stop_to_end_s"] < 1.0


def test_official_file_upload_then_a_run_that_uses_it(server: Server) -> None:
    seen = _official("upload_and_run", server, "story")
    assert seen["upload"]["name"] == "notes.txt"
    assert seen["run"]["data"]["outputs"]["doc"]["filename"] == "notes.txt"


def test_sdks_are_the_pinned_versions() -> None:
    from tests.serve_support import SDKS, sdk_path

    for name, version in SDKS.items():
        dist = "dify_client" if name == "dify-client" else "dify_client_python"
        assert (sdk_path(name) / f"{dist}-{version}.dist-info").is_dir()


def test_server_log_has_no_traceback(server: Server, tmp_path: Path) -> None:
    assert "Traceback" not in server.output()
