"""The rest of Dify's Service API over a real `firstgate serve` (SQLite and
PostgreSQL): workflow logs, conversation names and variables, feedbacks,
suggested questions, the site, end users, file previews, and Dify's errors for
audio and annotations. Each guard has a test that fails without it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.postgres_support import fresh_database, postgres_server  # noqa: F401 - fixtures
from tests.serve_support import APPS, KEYS, Server, echo_model, run_sdk, serve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("serve")
    with echo_model() as model:
        if request.param == "postgres":
            with (
                fresh_database(request.getfixturevalue("postgres_server")) as url,
                serve(tmp, model, database=url) as running,
            ):
                yield running
        else:
            with serve(tmp, model) as running:
                yield running


def _error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"code", "message", "status"}, body
    assert body["code"] == code and body["status"] == status, body
    return body


def _chat(server: Server, user: str, query: str, conversation: str | None = None) -> dict:
    with server.key_client("chat") as http:
        body = {"inputs": {}, "query": query, "user": user, "response_mode": "blocking"}
        if conversation:
            body["conversation_id"] = conversation
        reply = http.post("/v1/chat-messages", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


def _run(server: Server, user: str, topic: str) -> dict:
    with server.key_client("story") as http:
        reply = http.post(
            "/v1/workflows/run",
            json={"inputs": {"topic": topic}, "user": user, "response_mode": "blocking"},
        )
    assert reply.status_code == 200, reply.text
    return reply.json()


# ---- GET /v1/workflows/logs


def test_workflow_logs_filter_by_status_keyword_time_and_page(server: Server) -> None:
    marker = f"k{time.time_ns()}"
    start = time.time()
    runs = [_run(server, "logger", f"{marker.upper()} fox {i}") for i in range(3)]
    with server.key_client("story") as http:
        every = http.get("/v1/workflows/logs", params={"keyword": marker}).json()
        assert every["total"] == 3 and every["page"] == 1 and every["has_more"] is False
        assert [e["workflow_run"]["id"] for e in every["data"]] == [
            r["workflow_run_id"] for r in reversed(runs)
        ]
        entry = every["data"][0]
        assert entry["workflow_run"]["status"] == "succeeded"
        assert entry["created_by_end_user"]["session_id"] == "logger"
        assert entry["created_from"] == "service-api"
        assert entry["workflow_run"]["triggered_from"] == "app-run"
        assert entry["created_by_end_user"]["type"] == "service_api"
        # Case is ignored, as Dify's ILIKE ignores it.
        assert (
            http.get("/v1/workflows/logs", params={"keyword": marker.upper()}).json()["total"] == 3
        )
        paged = http.get("/v1/workflows/logs", params={"keyword": marker, "limit": 2}).json()
        assert len(paged["data"]) == 2 and paged["has_more"] is True and paged["total"] == 3
        second = http.get(
            "/v1/workflows/logs", params={"keyword": marker, "limit": 2, "page": 2}
        ).json()
        assert len(second["data"]) == 1 and second["has_more"] is False
        failed = http.get("/v1/workflows/logs", params={"keyword": marker, "status": "failed"})
        assert failed.json()["total"] == 0
        before = http.get(
            "/v1/workflows/logs",
            params={"keyword": marker, "created_at__before": _iso(start - 60)},
        ).json()
        assert before["total"] == 0
        after = http.get(
            "/v1/workflows/logs",
            params={"keyword": marker, "created_at__after": _iso(start - 60)},
        ).json()
        assert after["total"] == 3
        # A keyword's `%` and `_` are literal characters, not patterns.
        assert http.get("/v1/workflows/logs", params={"keyword": "%"}).json()["total"] == 0
        _error(http.get("/v1/workflows/logs", params={"status": "running"}), 400, "invalid_param")
        _error(http.get("/v1/workflows/logs", params={"limit": 101}), 400, "invalid_param")
        _error(
            http.get("/v1/workflows/logs", params={"created_at__after": "yesterday"}),
            400,
            "invalid_param",
        )
    # A chat turn's run is its conversation's, not a workflow log.
    with server.key_client("chat") as http:
        _chat(server, "logger", marker)
        assert http.get("/v1/workflows/logs", params={"keyword": marker}).json()["total"] == 0


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


# ---- conversations: names and variables


def test_rename_a_conversation_by_name_or_from_its_first_query(server: Server) -> None:
    first = _chat(server, "namer", "plan   a trip to Lisbon")
    cid = first["conversation_id"]
    with server.key_client("chat") as http:
        named = http.post(f"/v1/conversations/{cid}/name", json={"name": "Trip", "user": "namer"})
        assert named.status_code == 200, named.text
        assert named.json()["name"] == "Trip" and named.json()["id"] == cid
        listed = http.get("/v1/conversations", params={"user": "namer"}).json()["data"]
        assert listed[0]["name"] == "Trip"
        auto = http.post(
            f"/v1/conversations/{cid}/name", json={"auto_generate": True, "user": "namer"}
        )
        # Named by the app's model (the fake echoes the query it was given).
        assert auto.json()["name"] == "echo: plan a trip to Lisbon"
        _error(
            http.post(f"/v1/conversations/{cid}/name", json={"name": " ", "user": "namer"}),
            400,
            "invalid_param",
        )
        _error(
            http.post(f"/v1/conversations/{cid}/name", json={"name": "x", "user": "someone"}),
            404,
            "not_found",
        )
    with server.key_client("story") as http:
        _error(
            http.post(f"/v1/conversations/{cid}/name", json={"name": "x", "user": "namer"}),
            400,
            "not_chat_app",
        )


def test_conversation_variables_are_listed_and_updated_by_type(server: Server) -> None:
    cid = _chat(server, "vars", "hello")["conversation_id"]
    with server.key_client("chat") as http:
        listed = http.get(f"/v1/conversations/{cid}/variables", params={"user": "vars"}).json()
        by_name = {v["name"]: v for v in listed["data"]}
        assert set(by_name) == {"topic", "turns"} and listed["has_more"] is False
        assert by_name["topic"]["value"] == "none" and by_name["turns"]["value_type"] == "number"
        one = http.get(
            f"/v1/conversations/{cid}/variables",
            params={"user": "vars", "variable_name": "turns"},
        ).json()["data"]
        assert [v["name"] for v in one] == ["turns"]
        topic = by_name["topic"]["id"]
        put = http.put(
            f"/v1/conversations/{cid}/variables/{topic}", json={"value": "boats", "user": "vars"}
        )
        assert put.status_code == 200, put.text
        assert put.json()["value"] == "boats"
        again = http.get(f"/v1/conversations/{cid}/variables", params={"user": "vars"}).json()
        assert {v["name"]: v["value"] for v in again["data"]}["topic"] == "boats"
        # The wrong type is Dify's 400 bad_request; a bool is no number.
        _error(
            http.put(
                f"/v1/conversations/{cid}/variables/{topic}", json={"value": 3, "user": "vars"}
            ),
            400,
            "bad_request",
        )
        turns = by_name["turns"]["id"]
        _error(
            http.put(
                f"/v1/conversations/{cid}/variables/{turns}", json={"value": True, "user": "vars"}
            ),
            400,
            "bad_request",
        )
        assert (
            http.put(
                f"/v1/conversations/{cid}/variables/{turns}", json={"value": 2.5, "user": "vars"}
            ).json()["value"]
            == 2.5
        )
        _error(
            http.put(f"/v1/conversations/{cid}/variables/{topic}", json={"user": "vars"}),
            400,
            "invalid_param",
        )
        _error(
            http.put(
                f"/v1/conversations/{cid}/variables/no-such-id",
                json={"value": "x", "user": "vars"},
            ),
            404,
            "not_found",
        )
        _error(
            http.get(f"/v1/conversations/{cid}/variables", params={"user": "other"}),
            404,
            "not_found",
        )
        _error(
            http.put(
                f"/v1/conversations/{cid}/variables/{topic}", json={"value": "x", "user": "other"}
            ),
            404,
            "not_found",
        )
    # The next turn starts from the updated value (the store holds it).
    _chat(server, "vars", "again", cid)
    with server.key_client("chat") as http:
        after = http.get(f"/v1/conversations/{cid}/variables", params={"user": "vars"}).json()
    assert {v["name"]: v["value"] for v in after["data"]}["topic"] == "boats"


# ---- feedbacks and suggested questions


def test_feedback_on_a_message_and_the_apps_feedbacks(server: Server) -> None:
    turn = _chat(server, "rater", "rate me")
    mid = turn["message_id"]
    with server.key_client("chat") as http:
        liked = http.post(
            f"/v1/messages/{mid}/feedbacks",
            json={"rating": "like", "user": "rater", "content": "good"},
        )
        assert liked.status_code == 200 and liked.json() == {"result": "success"}
        listed = http.get("/v1/app/feedbacks").json()["data"]
        messages = http.get(
            "/v1/messages", params={"user": "rater", "conversation_id": turn["conversation_id"]}
        ).json()["data"]
        assert [m["feedback"] for m in messages] == [{"rating": "like"}]
        mine = [f for f in listed if f["message_id"] == mid]
        assert len(mine) == 1 and mine[0]["rating"] == "like" and mine[0]["content"] == "good"
        assert mine[0]["conversation_id"] == turn["conversation_id"]
        assert mine[0]["from_source"] == "user"
        http.post(f"/v1/messages/{mid}/feedbacks", json={"rating": "dislike", "user": "rater"})
        listed = http.get("/v1/app/feedbacks", params={"limit": 101}).json()["data"]
        assert [f["rating"] for f in listed if f["message_id"] == mid] == ["dislike"]
        # A null rating takes the feedback back; with none to take back it is Dify's 400.
        cleared = http.post(f"/v1/messages/{mid}/feedbacks", json={"rating": None, "user": "rater"})
        assert cleared.status_code == 200
        assert mid not in [f["message_id"] for f in http.get("/v1/app/feedbacks").json()["data"]]
        _error(
            http.post(f"/v1/messages/{mid}/feedbacks", json={"rating": None, "user": "rater"}),
            400,
            "invalid_param",
        )
        # A message of another user is Dify's 404, and nothing is written.
        _error(
            http.post(f"/v1/messages/{mid}/feedbacks", json={"rating": "like", "user": "other"}),
            404,
            "not_found",
        )
        assert mid not in [f["message_id"] for f in http.get("/v1/app/feedbacks").json()["data"]]
        _error(
            http.post(f"/v1/messages/{mid}/feedbacks", json={"rating": "meh", "user": "rater"}),
            400,
            "invalid_param",
        )
        _error(http.get("/v1/app/feedbacks", params={"limit": 102}), 400, "invalid_param")
    # Another app's key does not reach this app's message.
    with server.key_client("story") as http:
        _error(
            http.post(f"/v1/messages/{mid}/feedbacks", json={"rating": "like", "user": "rater"}),
            404,
            "not_found",
        )


def test_deleting_a_conversation_deletes_its_feedback(server: Server) -> None:
    turn = _chat(server, "deleter", "soon gone")
    with server.key_client("chat") as http:
        http.post(
            f"/v1/messages/{turn['message_id']}/feedbacks",
            json={"rating": "like", "user": "deleter"},
        )
        gone = http.request(
            "DELETE", f"/v1/conversations/{turn['conversation_id']}", json={"user": "deleter"}
        )
        assert gone.status_code == 204
        listed = http.get("/v1/app/feedbacks", params={"limit": 101}).json()["data"]
    assert turn["message_id"] not in [f["message_id"] for f in listed]


def test_suggested_questions_are_difys_error_when_off(server: Server) -> None:
    mid = _chat(server, "asker", "what next?")["message_id"]
    with server.key_client("chat") as http:
        _error(
            http.get(f"/v1/messages/{mid}/suggested", params={"user": "asker"}),
            400,
            "bad_request",
        )
        _error(
            http.get(f"/v1/messages/{mid}/suggested", params={"user": "other"}), 404, "not_found"
        )
        _error(http.get(f"/v1/messages/{mid}/suggested"), 400, "invalid_param")
    with server.key_client("story") as http:
        _error(
            http.get(f"/v1/messages/{mid}/suggested", params={"user": "asker"}),
            400,
            "not_chat_app",
        )


def test_suggested_questions_through_the_apps_model_when_on(tmp_path: Path) -> None:
    apps = tmp_path / "apps"
    apps.mkdir()
    chat = (APPS / "chat.yml").read_text()
    (apps / "chat.yml").write_text(
        chat.replace(
            "  features:\n",
            "  features:\n    suggested_questions_after_answer: {enabled: true}\n",
            1,
        )
    )
    with (
        echo_model() as model,
        serve(tmp_path, model, apps=apps, keys={"chat": KEYS["chat"]}) as on,
    ):
        # The fake model echoes the conversation it was given: the query's array comes back.
        turn = _chat(on, "asker", '["Where to eat?","When to go?"]')
        with on.key_client("chat") as http:
            reply = http.get(
                f"/v1/messages/{turn['message_id']}/suggested", params={"user": "asker"}
            )
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"result": "success", "data": ["Where to eat?", "When to go?"]}


# ---- the site, end users, file previews


def test_site_describes_the_app(server: Server) -> None:
    with server.key_client("story") as http:
        site = http.get("/v1/site").json()
    assert site["title"] == "Story" and site["description"] == "Start -> LLM -> End"
    assert "default_language" in site and "use_icon_as_answer_icon" in site


def test_end_users_are_found_by_the_id_the_logs_give(server: Server) -> None:
    _run(server, "someone-seen", "owls")
    with server.key_client("story") as http:
        logs = http.get("/v1/workflows/logs", params={"keyword": "someone-seen"}).json()
        end_user = logs["data"][0]["created_by_end_user"]["id"]
        found = http.get(f"/v1/end-users/{end_user}")
        assert found.status_code == 200, found.text
        assert found.json()["session_id"] == "someone-seen" and found.json()["id"] == end_user
        _error(http.get("/v1/end-users/00000000-0000-0000-0000-000000000000"), 404, "not_found")
    # The same user id under another app is another end user.
    _chat(server, "someone-seen", "hello")
    with server.key_client("chat") as http:
        _error(http.get(f"/v1/end-users/{end_user}"), 404, "not_found")


def test_file_preview_of_an_upload_of_this_app(server: Server) -> None:
    with server.key_client("story") as http:
        upload = http.post(
            "/v1/files/upload",
            files={"file": ("n.txt", b"some notes\n", "text/plain")},
            data={"user": "previewer"},
        ).json()
        shown = http.get(f"/v1/files/{upload['id']}/preview", params={"user": "previewer"})
        assert shown.status_code == 200 and shown.content == b"some notes\n"
        assert shown.headers["Content-Type"].startswith("text/plain")
        assert shown.headers["X-Content-Type-Options"] == "nosniff"
        attached = http.get(f"/v1/files/{upload['id']}/preview", params={"as_attachment": "true"})
        assert attached.headers["Content-Disposition"].startswith("attachment")
        _error(http.get("/v1/files/no-such-file/preview"), 404, "file_not_found")
    with server.key_client("chat") as http:
        _error(http.get(f"/v1/files/{upload['id']}/preview"), 403, "file_access_denied")


# ---- audio and annotations


def test_audio_is_difys_error_when_off_or_when_no_route_serves_it(server: Server) -> None:
    audio = {"file": ("a.mp3", b"ID3" + bytes(32), "audio/mpeg")}
    with server.key_client("story") as http:  # speech_to_text on, text_to_speech off
        _error(
            http.post("/v1/audio-to-text", files=audio, data={"user": "u"}),
            400,
            "provider_not_initialize",
        )
        _error(http.post("/v1/audio-to-text", data={"user": "u"}), 400, "no_audio_uploaded")
        _error(
            http.post("/v1/text-to-audio", json={"text": "hi", "user": "u"}), 400, "invalid_param"
        )
    with server.key_client("chat") as http:  # text_to_speech on, speech_to_text off
        _error(
            http.post("/v1/text-to-audio", json={"text": "hi", "user": "u"}),
            400,
            "provider_not_initialize",
        )
        _error(
            http.post("/v1/audio-to-text", files=audio, data={"user": "u"}), 400, "invalid_param"
        )


def test_annotations_are_difys_404(server: Server) -> None:
    with server.key_client("chat") as http:
        for method, path in (
            ("GET", "/v1/apps/annotations"),
            ("POST", "/v1/apps/annotations"),
            ("POST", "/v1/apps/annotation-reply/enable"),
        ):
            _error(http.request(method, path, json={}), 404, "not_found")


# ---- both client SDKs


def test_official_sdk_feedback_and_rename(server: Server) -> None:
    seen = run_sdk(
        "dify-client", "official_client.py", "feedback_and_rename", server.url, KEYS["chat"]
    )
    assert seen["feedback"] == {"result": "success"}
    assert seen["renamed"]["name"] == "Renamed by the SDK"
    assert seen["other_user_feedback"] == 404


def test_typed_sdk_feedback_suggested_and_audio(server: Server) -> None:
    seen = run_sdk(
        "dify-client-python", "typed_client.py", "feedback_suggested", server.url, KEYS["chat"]
    )
    assert seen["feedback"] == "success"
    assert seen["suggested"] == {"status": 400, "code": "bad_request"}
    assert seen["text_to_audio"] == {"status": 400, "code": "provider_not_initialize"}


def test_typed_sdk_audio_to_text(server: Server, tmp_path: Path) -> None:
    seen = run_sdk(
        "dify-client-python", "typed_client.py", "audio_to_text", server.url, KEYS["story"]
    )
    assert seen == {"status": 400, "code": "provider_not_initialize"}
