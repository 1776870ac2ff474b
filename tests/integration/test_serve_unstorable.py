"""Text the store cannot hold (NUL, half a UTF-16 surrogate pair) at `firstgate
serve`, over real sockets on both stores: refused at the API with Dify's 400,
mended when a model sends it, and when a run makes it anyway (a template) the
turn fails with our own words, is kept marked `error`, and the conversation
takes its next turn at once; a workflow answers 200 `failed`, never 500."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.serve_support import APPS, Server, echo_model, serve

pytestmark = pytest.mark.slow

KEYS = {
    "chat": "chat-key-0123456789",
    "story": "story-key-0123456789",
    "moody_chat": "moody-chat-key-0123456789",
    "moody_flow": "moody-flow-key-0123456789",
}
NOT_RECORDED = "the run could not be saved in the state database"
# What a raw exception would have put in a reply.
RAW_WORDS = ("codec", "surrogates", "UnicodeEncodeError", "Traceback", "'M':", "22021")

# A template that makes half a surrogate pair when asked to (Jinja reads `\udfff`).
_MOODY = """
version: 0.1.5
kind: app
app: {{name: {name}, mode: {mode}}}
workflow:
  graph:
    nodes:
      - id: start
        data:
          type: start
          title: Start
          variables: [{{variable: bad, label: Bad, type: text-input, required: false}}]
      - id: tpl
        data:
          type: template-transform
          title: Moody
          template: '{{{{ "\\udfff" if bad else "fine" }}}}'
          variables: [{{variable: bad, value_selector: [start, bad]}}]
      - id: out
        data: {out}
    edges:
      - {{source: start, target: tpl, sourceHandle: source, targetHandle: target}}
      - {{source: tpl, target: out, sourceHandle: source, targetHandle: target}}
"""


def _apps(directory: Path) -> Path:
    directory.mkdir()
    for stem in ("chat", "story"):
        (directory / f"{stem}.yml").write_text((APPS / f"{stem}.yml").read_text())
    answer = '{type: answer, title: Answer, answer: "{{#tpl.output#}}"}'
    end = "{type: end, title: End, outputs: [{variable: text, value_selector: [tpl, output]}]}"
    (directory / "moody_chat.yml").write_text(
        _MOODY.format(name="Moody chat", mode="advanced-chat", out=answer)
    )
    (directory / "moody_flow.yml").write_text(
        _MOODY.format(name="Moody flow", mode="workflow", out=end)
    )
    return directory


@pytest.fixture(scope="module")
def model() -> Iterator[str]:
    with echo_model() as base_url:
        yield base_url


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, model: str, tmp_path: Path) -> Iterator[Server]:
    database = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with serve(tmp_path, model, apps=_apps(tmp_path / "apps"), database=database, keys=KEYS) as s:
        yield s


def _client(server: Server, stem: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {KEYS[stem]}"}, timeout=30
    )


def _clean(text: str) -> None:
    assert not any(word in text for word in RAW_WORDS), text


def _refused(reply: httpx.Response, field: str) -> None:
    assert reply.status_code == 400, reply.text
    body = reply.json()
    assert body["code"] == "invalid_param" and body["status"] == 400, body
    assert field in body["message"] and "cannot be stored" in body["message"], body
    _clean(body["message"])


def _stream(http: httpx.Client, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with http.stream("POST", path, json={**body, "response_mode": "streaming"}) as reply:
        assert reply.status_code == 200, reply.read()
        return [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: ")]


CHAT = {"inputs": {}, "query": "hi", "user": "u"}
FLOW = {"inputs": {"topic": "hi"}, "user": "u"}


@pytest.mark.parametrize(
    ("path", "app", "body", "field"),
    [
        ("/v1/chat-messages", "chat", {**CHAT, "query": "half \udfff"}, "query"),
        ("/v1/chat-messages", "chat", {**CHAT, "query": "nul \x00 here"}, "query"),
        ("/v1/chat-messages", "chat", {**CHAT, "user": "u\x00"}, "user"),
        ("/v1/chat-messages", "chat", {**CHAT, "inputs": {"k\udfff": 1}}, "inputs.k"),
        ("/v1/workflows/run", "story", {**FLOW, "inputs": {"topic": "\ud83d"}}, "inputs.topic"),
        ("/v1/workflows/run", "story", {**FLOW, "files": [{"url": "x\x00"}]}, "files.0.url"),
    ],
)  # fmt: skip
def test_text_the_store_cannot_hold_is_refused_at_the_api(
    server: Server, path: str, app: str, body: dict[str, Any], field: str
) -> None:
    with _client(server, app) as http:
        # json.dumps writes both as `\u` escapes, which are valid JSON.
        _refused(http.post(path, content=json.dumps(body)), field)
        raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        _refused(http.post(path, content=raw), field)  # the raw bytes, as a lax client sends
        ok = {**(CHAT if app == "chat" else FLOW), "response_mode": "blocking"}
        assert http.post(path, json=ok).status_code == 200
    assert "Traceback" not in server.output()


def test_a_nul_in_a_query_or_a_path_is_refused_before_the_store(server: Server) -> None:
    with _client(server, "chat") as chat, _client(server, "story") as story:
        _refused(chat.get("/v1/conversations", params={"user": "u\x00"}), "user")
        _refused(chat.get("/v1/messages", params={"user": "u", "conversation_id": "\x00"}), "conversation_id")  # fmt: skip
        _refused(chat.request("DELETE", "/v1/conversations/a%00b", json={"user": "u"}), "conversation_id")  # fmt: skip
        _refused(story.get("/v1/workflows/run/a%00b"), "run_id")
        _refused(story.get("/v1/workflow/a%00b/events", params={"user": "u"}), "run_id")
        upload = story.post(
            "/v1/files/upload",
            files={"file": ("a.txt", b"a", "text/plain")},
            data={"user": "u\x00"},
        )
        _refused(upload, "user")
    assert "Traceback" not in server.output()


def test_a_character_the_model_splits_between_frames_is_whole_everywhere(server: Server) -> None:
    with _client(server, "chat") as http:
        events = _stream(http, "/v1/chat-messages", {**CHAT, "query": "[split]"})
        streamed = "".join(e["answer"] for e in events if e["event"] == "message")
        assert streamed == "smile \U0001f600 half \ufffd"
        assert events[-1]["event"] == "message_end"
        conversation = events[-1]["conversation_id"]
        page = http.get("/v1/messages", params={"user": "u", "conversation_id": conversation})
        assert [m["answer"] for m in page.json()["data"]] == [streamed]
        again = http.post(
            "/v1/chat-messages",
            json={**CHAT, "conversation_id": conversation, "response_mode": "blocking"},
        )
        assert again.status_code == 200 and again.json()["answer"] == "echo: hi"


def test_a_turn_the_store_refuses_is_kept_as_error_and_the_next_turn_runs_at_once(
    server: Server,
) -> None:
    with _client(server, "moody_chat") as http:
        bad = {"inputs": {"bad": "yes"}, "query": "first", "user": "u"}
        events = _stream(http, "/v1/chat-messages", bad)
        # The answer streamed as it was made (a JSON escape), then the turn failed.
        streamed = "".join(e["answer"] for e in events if e["event"] == "message")
        assert streamed == "\udfff"
        finished = next(e for e in events if e["event"] == "workflow_finished")
        assert finished["data"]["status"] == "failed"
        assert finished["data"]["error"] == NOT_RECORDED
        assert events[-1]["event"] == "error" and NOT_RECORDED in events[-1]["message"]
        conversation = events[-1]["conversation_id"]
        blocking = http.post("/v1/chat-messages", json={**bad, "response_mode": "blocking"})
        assert blocking.status_code == 400, blocking.text
        assert blocking.json()["code"] == "completion_request_error"
        assert NOT_RECORDED in blocking.json()["message"]
        _clean(blocking.text)
        # Kept, marked error, mended; and the conversation is free now, not in 21 minutes.
        page = http.get("/v1/messages", params={"user": "u", "conversation_id": conversation})
        kept = page.json()["data"]
        assert [(m["query"], m["answer"], m["status"]) for m in kept] == [
            ("first", "\ufffd", "error")
        ]
        started = time.monotonic()
        good = {"inputs": {}, "query": "second", "user": "u", "conversation_id": conversation}
        reply = http.post("/v1/chat-messages", json={**good, "response_mode": "blocking"})
        assert reply.status_code == 200, reply.text
        assert reply.json()["answer"] == "fine" and time.monotonic() - started < 10


def test_a_workflow_run_the_store_refuses_answers_200_failed(server: Server) -> None:
    with _client(server, "moody_flow") as http:
        reply = http.post(
            "/v1/workflows/run",
            json={"inputs": {"bad": "yes"}, "user": "u", "response_mode": "blocking"},
        )
        assert reply.status_code == 200, reply.text
        data = reply.json()["data"]
        assert data["status"] == "failed" and data["error"] == NOT_RECORDED
        assert data["outputs"] == {"text": "\udfff"}  # what the run made, as a JSON escape
        _clean(reply.text)
        record = http.get(f"/v1/workflows/run/{reply.json()['workflow_run_id']}").json()
        assert record["status"] == "failed" and record["outputs"] == {"text": "\ufffd"}
        events = _stream(http, "/v1/workflows/run", {"inputs": {"bad": "yes"}, "user": "u"})
        assert events[-1]["event"] == "workflow_finished"
        assert events[-1]["data"]["status"] == "failed"
    assert "Traceback" not in server.output()
