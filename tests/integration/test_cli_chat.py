"""`firstgate run` for chatflows, files and environment variables, as a
subprocess against the raw-socket fake model and a real state database; and
the `--json` lines compared field for field with Dify's streaming events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.fakes import llm_server as fake
from tests.integration.test_cli import EXAMPLES, firstgate, lines, models_file

FLOWS = Path(__file__).resolve().parents[1] / "flows"

# Dify's streaming events (api/core/app/entities/task_entities.py and the
# generate-response converters): the keys of each line, envelope included.
CHAT_ENVELOPE = {"event", "conversation_id", "message_id", "created_at", "task_id"}
WORKFLOW_ENVELOPE = {"event", "workflow_run_id", "task_id"}
CONTAINER = {
    "parallel_id",
    "parallel_start_node_id",
    "parent_parallel_id",
    "parent_parallel_start_node_id",
    "iteration_id",
    "loop_id",
}
DIFY_DATA = {
    "workflow_started": {"id", "workflow_id", "inputs", "created_at", "reason"},
    "node_started": {
        "id", "node_id", "node_type", "title", "index", "predecessor_node_id", "inputs",
        "created_at", "extras", "parallel_run_id", "agent_strategy", *CONTAINER,
    },
    "node_finished": {
        "id", "node_id", "node_type", "title", "index", "predecessor_node_id", "inputs",
        "process_data", "outputs", "status", "error", "elapsed_time", "execution_metadata",
        "created_at", "finished_at", "files", *CONTAINER,
    },
    "node_retry": {
        "id", "node_id", "node_type", "title", "index", "predecessor_node_id", "inputs",
        "process_data", "outputs", "status", "error", "elapsed_time", "execution_metadata",
        "created_at", "finished_at", "files", "retry_index", *CONTAINER,
    },
    "workflow_finished": {
        "id", "workflow_id", "status", "outputs", "error", "elapsed_time", "total_tokens",
        "total_steps", "created_by", "created_at", "finished_at", "exceptions_count", "files",
    },
    "text_chunk": {"text", "from_variable_selector"},
}  # fmt: skip
# firstgate adds the error's class to node and run ends; nothing else.
EXTRA_DATA = {"node_finished": {"error_type"}, "node_retry": {"error_type"}}
EXTRA_DATA["workflow_finished"] = {"error_type"}


def run_chat(tmp_path: Path, server: fake.FakeLLMServer, *args: str) -> Any:
    return firstgate(
        "run",
        str(EXAMPLES / "chat_memory.yml"),
        "--models",
        str(models_file(tmp_path, server)),
        "--state",
        str(tmp_path / "state.db"),
        *args,
    )


def test_a_conversation_over_two_cli_turns(tmp_path: Path) -> None:
    replies = [fake.tokens(["Hello ", "Ada."]), fake.tokens(["You are ", "Ada."])]
    with fake.FakeLLMServer(replies) as server:
        first = run_chat(tmp_path, server, "--query", "I am Ada.", "--conversation", "c-1")
        second = run_chat(tmp_path, server, "--query", "Who am I?", "--conversation", "c-1")
        other_user = run_chat(
            tmp_path, server, "--query", "hi", "--conversation", "c-1", "--user", "eve"
        )
        history = server.requests[1].json()["messages"]
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("Hello Ada.\n(turn 1)\n")
    assert "conversation c-1 (continue it with --conversation c-1)" in first.stdout
    assert second.stdout.startswith("You are Ada.\n(turn 2)\n")
    assert [(m["role"], m["content"]) for m in history[1:]] == [
        ("user", "I am Ada."),
        ("assistant", "Hello Ada.\n(turn 1)"),
        ("user", "Who am I?"),
    ]
    assert other_user.returncode == 2
    assert "belongs to another app or user" in other_user.stderr
    assert "Traceback" not in first.stderr + second.stderr + other_user.stderr


def test_chat_flags_where_they_do_not_belong_are_exit_2(tmp_path: Path) -> None:
    no_query = firstgate("run", str(EXAMPLES / "chat_memory.yml"))
    assert no_query.returncode == 2
    assert "this is a chatflow: give the user's message with --query" in no_query.stderr
    not_chat = firstgate("run", str(EXAMPLES / "if_else_template.yml"), "--query", "hi")
    assert not_chat.returncode == 2
    assert "--query and --conversation are for chatflows" in not_chat.stderr


def test_json_lines_are_difys_events_field_for_field(tmp_path: Path) -> None:
    with fake.FakeLLMServer(fake.tokens(["Hi", " there"])) as server:
        result = run_chat(tmp_path, server, "--query", "hello", "--json")
    assert result.returncode == 0, result.stderr
    events = lines(result.stdout)
    names = [e["event"] for e in events]
    assert names[0] == "workflow_started" and names[-2:] == ["workflow_finished", "message_end"]
    assert {e["conversation_id"] for e in events} == {events[0]["conversation_id"]}
    assert {e["message_id"] for e in events} == {events[0]["message_id"]}
    for event in events:
        name = event["event"]
        if name == "message":
            assert set(event) == CHAT_ENVELOPE | {"id", "answer", "from_variable_selector"}
            assert event["id"] == event["message_id"]
        elif name == "message_end":
            assert set(event) == CHAT_ENVELOPE | {"id", "metadata", "files"}
            assert set(event["metadata"]) == {"usage", "retriever_resources"}
        elif name in DIFY_DATA:
            assert set(event) == CHAT_ENVELOPE | {"workflow_run_id", "data"}
            assert set(event["data"]) == DIFY_DATA[name] | EXTRA_DATA.get(name, set()), name
        else:
            assert name == "node_first_token"  # firstgate's own, same envelope
            assert set(event) == CHAT_ENVELOPE | {"workflow_run_id", "data"}
    # Each token once: in the message events, and the whole text in the LLM's outputs.
    assert [e["answer"] for e in events if e["event"] == "message"] == [
        "Hi",
        " there",
        "\n(turn ",
        "1",
        ")",
    ]
    assert result.stdout.count('"Hi"') == 1
    (llm_done,) = [
        e for e in events if e["event"] == "node_finished" and e["data"]["node_id"] == "llm"
    ]
    assert llm_done["data"]["outputs"]["text"] == "Hi there"
    assert llm_done["data"]["execution_metadata"]["total_tokens"] > 0
    starts = [e["data"] for e in events if e["event"] == "node_started"]
    assert [(s["node_id"], s["index"], s["predecessor_node_id"]) for s in starts] == [
        ("start", 1, None),
        ("count", 2, "start"),
        ("llm", 3, "count"),
        ("answer", 4, "llm"),
    ]
    ends = {e["data"]["node_id"]: e["data"] for e in events if e["event"] == "node_finished"}
    assert all(ends[s["node_id"]]["id"] == s["id"] for s in starts)  # one execution id each
    done = events[-2]["data"]
    assert done["status"] == "succeeded" and done["total_steps"] == 4
    assert done["total_tokens"] == llm_done["data"]["execution_metadata"]["total_tokens"]


def test_workflow_json_streams_end_outputs_as_text_chunks(tmp_path: Path) -> None:
    result = firstgate("run", str(FLOWS / "echo_input_to_end.yml"), "-i", "query=hi", "--json")
    assert result.returncode == 0, result.stderr
    events = lines(result.stdout)
    assert all(set(e) == WORKFLOW_ENVELOPE | {"data"} for e in events)
    chunks = [e["data"] for e in events if e["event"] == "text_chunk"]
    assert chunks == [{"text": "hi", "from_variable_selector": ["1", "query"]}]
    assert events[-1]["event"] == "workflow_finished"


def test_file_inputs_become_difys_file_objects(tmp_path: Path) -> None:
    flow = tmp_path / "files.yml"
    doc = yaml.safe_load((FLOWS / "echo_input_to_end.yml").read_text())
    start, end = doc["workflow"]["graph"]["nodes"]
    start["data"]["variables"] = [
        {"variable": "doc", "type": "file", "required": True, "allowed_file_types": ["document"]},
    ]
    end["data"]["outputs"] = [
        {"variable": "name", "value_selector": ["1", "doc", "name"]},
        {"variable": "doc", "value_selector": ["1", "doc"]},
    ]
    flow.write_text(yaml.safe_dump(doc))
    report = tmp_path / "report.md"
    report.write_text("# hi\n")
    ok = firstgate("run", str(flow), "--input", f"doc=@{report}", "--json")
    assert ok.returncode == 0, ok.stderr
    done = lines(ok.stdout)[-1]["data"]["outputs"]
    assert done["name"] == "report.md"
    assert {k: done["doc"][k] for k in ("type", "transfer_method", "filename", "extension")} == {
        "type": "document",
        "transfer_method": "local_file",
        "filename": "report.md",
        "extension": ".md",
    }
    assert done["doc"]["size"] == 5 and done["doc"]["mime_type"] == "text/markdown"
    missing = firstgate("run", str(flow), "--input", f"doc=@{tmp_path / 'nope.pdf'}")
    assert missing.returncode == 2
    assert "input doc: no such file" in missing.stderr
    image = tmp_path / "cat.png"
    image.write_bytes(b"\x89PNG")
    refused = firstgate("run", str(flow), "--input", f"doc=@{image}")
    assert refused.returncode == 2
    assert "input doc: cat.png is a image file; this input accepts document" in refused.stderr
    for result in (missing, refused):
        assert "Traceback" not in result.stderr


SECRET_FLOW = {
    "kind": "app",
    "version": "0.3.1",
    "app": {"name": "secrets", "mode": "workflow"},
    "workflow": {
        "environment_variables": [
            {"name": "token", "value_type": "secret", "value": ""},
            {"name": "limit", "value_type": "number", "value": 3},
            {"name": "who", "value_type": "string", "value": "nobody"},
        ],
        "graph": {
            "nodes": [
                {"id": "s", "data": {"type": "start", "title": "S", "variables": []}},
                {
                    "id": "t",
                    "data": {
                        "type": "template-transform",
                        "title": "T",
                        "template": "{{ who }} uses {{ token }} up to {{ limit + 1 }}",
                        "variables": [
                            {"variable": "who", "value_selector": ["env", "who"]},
                            {"variable": "token", "value_selector": ["env", "token"]},
                            {"variable": "limit", "value_selector": ["env", "limit"]},
                        ],
                    },
                },
                {
                    "id": "e",
                    "data": {
                        "type": "end",
                        "title": "E",
                        "outputs": [{"variable": "said", "value_selector": ["t", "output"]}],
                    },
                },
            ],
            "edges": [
                {"source": "s", "target": "t", "sourceHandle": "source"},
                {"source": "t", "target": "e", "sourceHandle": "source"},
            ],
        },
    },
}


def test_environment_variables_and_secrets(tmp_path: Path) -> None:
    flow = tmp_path / "secrets.yml"
    flow.write_text(yaml.safe_dump(SECRET_FLOW))
    env_file = tmp_path / "prod.env"
    env_file.write_text("# values\nexport token='tok-very-secret-9'\nFIRSTGATE_ENV_who=file\n")
    state = tmp_path / "state.db"
    base = ("run", str(flow), "--env-file", str(env_file), "--state", str(state))
    human = firstgate(*base, env={"FIRSTGATE_ENV_who": "env wins"})
    as_json = firstgate(*base, "--json")
    assert human.returncode == 0, human.stderr
    assert "env wins uses *** up to 4" in human.stdout
    assert lines(as_json.stdout)[-1]["data"]["outputs"] == {"said": "file uses *** up to 4"}
    stored = state.read_bytes()
    for shown in (
        human.stdout + human.stderr,
        as_json.stdout + as_json.stderr,
        stored.decode("latin-1"),
    ):
        assert "tok-very-secret-9" not in shown
    bad_number = firstgate(*base, env={"FIRSTGATE_ENV_limit": "lots"})
    assert bad_number.returncode == 2
    assert "environment variable limit must be a number" in bad_number.stderr
    short = firstgate(*base, env={"FIRSTGATE_ENV_token": "abc"})
    assert short.returncode == 2 and "shorter than 4 characters" in short.stderr
    assert "abc" not in short.stderr.replace("characters", "")
    broken = tmp_path / "broken.env"
    broken.write_text("token tok-very-secret-9\n")
    bad_file = firstgate("run", str(flow), "--env-file", str(broken))
    assert bad_file.returncode == 2
    assert f"{broken}, line 1: expected NAME=value" in bad_file.stderr
    assert "tok-very-secret-9" not in bad_file.stderr
