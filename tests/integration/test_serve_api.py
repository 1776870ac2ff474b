"""`firstgate serve` as a client sees it, over real sockets: Dify's error
bodies for bad input, streaming details (pings, a clean end, a client that
goes away), one app's trouble never reaching another, the run console's page,
and a SIGTERM drain. Runs on both store backends."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.serve_support import APPS, KEYS, Server, echo_model, serve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model() -> Iterator[str]:
    with echo_model() as base_url:
        yield base_url


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest) -> str | None:
    return request.getfixturevalue("postgres_url") if request.param == "postgres" else None


@pytest.fixture
def server(model: str, tmp_path: Path, database: str | None) -> Iterator[Server]:
    with serve(tmp_path, model, database=database, env={"FIRSTGATE_SSE_PING_S": "0.3"}) as s:
        yield s


def _events(response: httpx.Response) -> Iterator[dict | str]:
    """Parsed SSE frames: event dicts, and the string "ping" for a ping."""
    buffer = ""
    for text in response.iter_text():
        buffer += text
        while "\n\n" in buffer:
            frame, buffer = buffer.split("\n\n", 1)
            lines = frame.split("\n")
            if "event: ping" in lines:
                yield "ping"
                continue
            data = [line[6:] for line in lines if line.startswith("data: ")]
            if data:
                yield json.loads("\n".join(data))
    assert buffer == "", f"the stream ended inside a frame: {buffer!r}"


def _error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"code", "message", "status"}, body
    assert body["code"] == code and body["status"] == status, body
    assert "Traceback" not in body["message"] and body["message"]
    return body


# ---- authentication and Dify's error bodies


def test_missing_wrong_and_malformed_keys_are_401(server: Server) -> None:
    with httpx.Client(base_url=server.url) as http:
        _error(http.get("/v1/info"), 401, "unauthorized")
        _error(http.get("/v1/info", headers={"Authorization": "Basic abc"}), 401, "unauthorized")
        reply = http.get("/v1/info", headers={"Authorization": "Bearer not-a-key-of-ours"})
        _error(reply, 401, "unauthorized")
        assert reply.headers["WWW-Authenticate"] == 'Bearer realm="api"'


def test_the_key_selects_the_app(server: Server) -> None:
    with server.key_client("chat") as chat, server.key_client("story") as story:
        assert chat.get("/v1/info").json() == {
            "name": "Echo chat", "description": "Start -> LLM (with memory) -> Answer",
            "tags": [], "mode": "advanced-chat", "author_name": "",
        }  # fmt: skip
        assert story.get("/v1/info").json()["mode"] == "workflow"
        assert chat.get("/v1/parameters").json()["opening_statement"] == "Say something."


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        (b"", "invalid_param", None),
        (b"{not json", "invalid_param", None),
        (b"[1, 2]", "invalid_param", None),
        (b'{"inputs": {"topic": "x"}}', "invalid_param", "user"),
        (b'{"inputs": "x", "user": "u"}', "invalid_param", "inputs"),
        (b'{"inputs": {"topic": "x"}, "user": "u", "response_mode": "fast"}', "invalid_param", "response_mode"),
        (b'{"inputs": {"topic": "x", "colour": "red"}, "user": "u"}', "invalid_param", "colour"),
        (b'{"inputs": {}, "user": "u"}', "invalid_param", "topic"),
        (b'{"inputs": {"topic": "x", "doc": "/etc/passwd"}, "user": "u"}', "invalid_param", "doc"),
        (b'{"inputs": {"topic": "x", "doc": {"transfer_method": "local_file", "path": "/etc/passwd"}}, "user": "u"}', "invalid_param", "doc"),
        (b'{"inputs": {"topic": "x", "doc": {"transfer_method": "local_file", "upload_file_id": "nope"}}, "user": "u"}', "invalid_param", "doc"),
    ],
)  # fmt: skip
def test_bad_run_bodies_are_dify_400s(
    server: Server, body: bytes, code: str, field: str | None
) -> None:
    with server.key_client("story") as http:
        reply = http.post("/v1/workflows/run", content=body)
    message = _error(reply, 400, code)["message"]
    if field:
        assert field in message


def test_a_file_input_never_reads_a_path_on_the_server(server: Server, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("server-side secret")
    with server.key_client("story") as http:
        for doc in (
            str(secret),
            f"@{secret}",
            {"transfer_method": "local_file", "path": str(secret)},
        ):
            body = {"inputs": {"topic": "x", "doc": doc}, "user": "u", "response_mode": "blocking"}
            reply = http.post("/v1/workflows/run", json=body)
            assert "server-side secret" not in reply.text
            _error(reply, 400, "invalid_param")


def test_an_oversized_body_is_413_and_the_server_goes_on(server: Server) -> None:
    with server.key_client("story") as http:
        big = b'{"inputs": {"topic": "' + b"x" * (5 * 1024 * 1024) + b'"}, "user": "u"}'
        _error(http.post("/v1/workflows/run", content=big), 413, "request_entity_too_large")
        assert http.get("/v1/info").status_code == 200


def test_a_chunked_body_over_the_limit_is_413(server: Server) -> None:
    def body() -> Iterator[bytes]:  # a generator: sent chunked, no Content-Length
        yield b'{"inputs": {"topic": "'
        for _ in range(50):
            yield b"x" * (1024 * 1024)
        yield b'"}, "user": "u"}'

    with server.key_client("story") as http:
        _error(http.post("/v1/workflows/run", content=body()), 413, "request_entity_too_large")
        assert http.get("/v1/info").status_code == 200


@pytest.mark.parametrize(
    "value", [b"5", b"2.5", b"NaN", b"Infinity", b"true", b'{"a": 1}', b'["a"]']
)
def test_a_text_input_takes_only_a_string(server: Server, value: bytes) -> None:
    with server.key_client("story") as http:
        body = b'{"inputs": {"topic": ' + value + b'}, "user": "u"}'
        message = _error(http.post("/v1/workflows/run", content=body), 400, "invalid_param")
        assert "topic" in message["message"] and "must be a string" in message["message"]


@pytest.mark.parametrize(
    "query",
    [
        {"timestamp": "\u00b2", "nonce": "n", "sign": "s"},  # a digit to isdigit, not to int
        {"timestamp": "9" * 5000, "nonce": "n", "sign": "s"},  # past int()'s digit limit
        {"timestamp": str(int(time.time())), "nonce": "n", "sign": "s\u00e9"},
    ],
)
def test_odd_file_links_are_403_without_a_key(server: Server, query: dict[str, str]) -> None:
    reply = httpx.get(f"{server.url}/files/{'0' * 36}/file-preview", params=query)
    _error(reply, 403, "forbidden")
    assert "Traceback" not in server.output()


def test_a_last_event_id_of_odd_digits_is_400(server: Server) -> None:
    with server.key_client("story") as http:
        run = http.post("/v1/workflows/run", json={"inputs": {"topic": "x"}, "user": "u"}).json()[
            "workflow_run_id"
        ]
        # `\xb2` is `²` in the latin-1 that HTTP headers are read as.
        reply = http.get(
            f"/v1/workflow/{run}/events", params={"user": "u"}, headers={"Last-Event-ID": b"\xb2"}
        )
        _error(reply, 400, "invalid_param")
        assert http.get(f"/v1/workflow/{run}/events", params={"user": "u"}).status_code == 200
    assert "Traceback" not in server.output()


def test_the_wrong_route_for_the_app_is_difys_error(server: Server) -> None:
    with server.key_client("story") as story, server.key_client("chat") as chat:
        _error(
            story.post("/v1/chat-messages", json={"inputs": {}, "query": "q", "user": "u"}),
            400,
            "not_chat_app",
        )
        _error(
            chat.post("/v1/workflows/run", json={"inputs": {}, "user": "u"}),
            400,
            "not_workflow_app",
        )
        _error(chat.get("/v1/nowhere"), 404, "not_found")
        _error(chat.put("/v1/info"), 405, "method_not_allowed")


def test_an_uploaded_page_is_served_as_a_sandboxed_attachment(server: Server) -> None:
    """An HTML upload (a document Dify accepts) cannot run script on this origin,
    and its link points to the server, whatever `Host` the request named."""
    page = b"<html><script>fetch('/v1/conversations')</script></html>"
    with server.key_client("story") as http:
        upload = http.post(
            "/v1/files/upload",
            files={"file": ("page.html", page, "text/html")},
            data={"user": "u"},
        ).json()
        doc = {"transfer_method": "local_file", "upload_file_id": upload["id"], "type": "document"}
        body = {"inputs": {"topic": "x", "doc": doc}, "user": "u", "response_mode": "blocking"}
        reply = http.post("/v1/workflows/run", json=body, headers={"Host": "evil.example"})
    url = reply.json()["data"]["outputs"]["doc"]["url"]
    assert url.startswith(server.url + "/files/"), url
    served = httpx.get(url)
    assert served.content == page
    assert served.headers["content-disposition"] == "attachment"
    assert served.headers["content-security-policy"].startswith("sandbox")
    assert served.headers["x-content-type-options"] == "nosniff"


def test_uploads_of_the_wrong_type_size_or_count(server: Server) -> None:
    with server.key_client("story") as http:
        _error(http.post("/v1/files/upload", data={"user": "u"}), 400, "no_file_uploaded")
        image = {"file": ("cat.png", b"\x89PNG....", "image/png")}
        _error(
            http.post("/v1/files/upload", files=image, data={"user": "u"}),
            415,
            "unsupported_file_type",
        )
        big = {"file": ("big.txt", b"x" * (15 * 1024 * 1024 + 1), "text/plain")}
        _error(http.post("/v1/files/upload", files=big, data={"user": "u"}), 413, "file_too_large")
        two = [("file", ("a.txt", b"a", "text/plain")), ("file", ("b.txt", b"b", "text/plain"))]
        _error(http.post("/v1/files/upload", files=two, data={"user": "u"}), 400, "too_many_files")
        ok = http.post("/v1/files/upload", files={"file": ("../../a b.txt", b"abc", "text/plain")})
        assert ok.status_code == 201 and ok.json()["name"] == "a b.txt"


def test_a_chat_in_someone_elses_conversation_is_404(server: Server) -> None:
    with server.key_client("chat") as http:
        first = http.post(
            "/v1/chat-messages",
            json={"inputs": {}, "query": "hi", "user": "alice", "response_mode": "blocking"},
        ).json()
        conversation = first["conversation_id"]
        body = {"inputs": {}, "query": "hi", "user": "mallory", "conversation_id": conversation}
        _error(http.post("/v1/chat-messages", json=body), 404, "not_found")
        _error(
            http.get("/v1/messages", params={"user": "mallory", "conversation_id": conversation}),
            404,
            "not_found",
        )
        bad = {**body, "conversation_id": "not-a-uuid"}
        _error(http.post("/v1/chat-messages", json=bad), 400, "invalid_param")
        # Alice's conversation: listed, paged, then deleted.
        listed = http.get("/v1/conversations", params={"user": "alice"}).json()
        assert [c["id"] for c in listed["data"]] == [conversation] and listed["has_more"] is False
        assert listed["data"][0]["name"] == "hi"
        page = http.get(
            "/v1/messages", params={"user": "alice", "conversation_id": conversation}
        ).json()
        assert [(m["query"], m["answer"]) for m in page["data"]] == [("hi", "echo: hi")]
        gone = http.request("DELETE", f"/v1/conversations/{conversation}", json={"user": "alice"})
        assert gone.status_code == 204
        assert http.get("/v1/conversations", params={"user": "alice"}).json()["data"] == []


# ---- streaming


def test_a_stream_pings_while_silent_and_ends_cleanly(server: Server) -> None:
    body = {"inputs": {"topic": "[think] please"}, "user": "u", "response_mode": "streaming"}
    with (
        server.key_client("story") as http,
        http.stream("POST", "/v1/workflows/run", json=body) as reply,
    ):
        assert reply.headers["content-type"].startswith("text/event-stream")
        frames = list(_events(reply))  # _events checks the stream ends on a frame boundary
    events = [f for f in frames if f != "ping"]
    assert events[0]["event"] == "workflow_started" and events[-1]["event"] == "workflow_finished"
    assert events[-1]["data"]["outputs"]["text"] == "thought it over"
    # 1.2 s of silence from the model with pings every 0.3 s of silence.
    first_text = next(i for i, f in enumerate(frames) if f != "ping" and f["event"] == "text_chunk")
    assert frames[:first_text].count("ping") >= 2
    assert "ping" not in frames[first_text:]


def _numbered(response: httpx.Response) -> list[tuple[int, dict]]:
    """The stream's event frames as (SSE id, event); a frame without an id fails."""
    found = []
    for frame in response.read().decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.split("\n") if ": " in line)
        if "data" in lines:
            assert "id" in lines, frame
            found.append((int(lines["id"]), json.loads(lines["data"])))
    return found


def test_every_frame_of_a_stream_has_an_id_to_resume_from(server: Server) -> None:
    body = {"inputs": {"topic": "a story"}, "user": "u", "response_mode": "streaming"}
    with server.key_client("story") as http:
        with http.stream("POST", "/v1/workflows/run", json=body) as reply:
            first = _numbered(reply)
        assert [i for i, _ in first] == list(range(1, len(first) + 1))
        run_id = first[0][1]["workflow_run_id"]
        with http.stream(
            "GET",
            f"/v1/workflow/{run_id}/events",
            params={"user": "u"},
            headers={"Last-Event-ID": "3"},
        ) as resumed:
            rest = _numbered(resumed)
    assert rest == first[3:]


def test_no_ping_while_events_flow(server: Server) -> None:
    body = {"inputs": {"topic": "[slow] story"}, "user": "u", "response_mode": "streaming"}
    pings = 0
    with (
        server.key_client("story") as http,
        http.stream("POST", "/v1/workflows/run", json=body) as reply,
    ):
        task = None
        for frame in _events(reply):
            if frame == "ping":
                pings += 1
                continue
            task = task or frame["task_id"]
            if frame["event"] == "text_chunk" and task:
                break
        http.post(f"/v1/workflows/tasks/{task}/stop", json={"user": "u"})
    assert pings == 0  # tokens every 0.1 s: never 0.3 s of silence


def test_a_client_that_goes_away_does_not_stop_the_run(server: Server) -> None:
    body = {"inputs": {"topic": "[medium] keep going"}, "user": "u", "response_mode": "streaming"}
    with server.key_client("story") as http:
        with http.stream("POST", "/v1/workflows/run", json=body) as reply:
            for frame in _events(reply):
                if frame != "ping" and frame["event"] == "text_chunk":
                    run_id = frame["workflow_run_id"]
                    break
        # The connection is closed now; the run goes on and is recorded whole.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            record = http.get(f"/v1/workflows/run/{run_id}").json()
            if record["status"] != "running":
                break
            time.sleep(0.2)
    assert record["status"] == "succeeded"
    assert record["outputs"]["text"].startswith("echo: m0") or "m19" in record["outputs"]["text"]


def test_a_stop_from_another_user_does_not_stop_the_run(server: Server) -> None:
    body = {"inputs": {"topic": "[medium] mine"}, "user": "alice", "response_mode": "streaming"}
    with (
        server.key_client("story") as http,
        http.stream("POST", "/v1/workflows/run", json=body) as reply,
    ):
        events = []
        for frame in _events(reply):
            if frame == "ping":
                continue
            events.append(frame)
            if len(events) == 1:
                stop = http.post(
                    f"/v1/workflows/tasks/{frame['task_id']}/stop", json={"user": "bob"}
                )
                assert stop.json() == {"result": "success"}  # Dify answers success regardless
    assert events[-1]["data"]["status"] == "succeeded"


# ---- isolation


def test_one_broken_app_is_not_served_and_the_others_are(model: str, tmp_path: Path) -> None:
    apps = tmp_path / "apps"
    shutil.copytree(APPS, apps)
    (apps / "broken.yml").write_text("app: {mode: workflow}\nworkflow: [not, a, mapping]\n")
    (apps / "keyless.yml").write_text((APPS / "story.yml").read_text())
    keys = {**KEYS, "broken": "broken-key-0123456789"}
    with serve(tmp_path, model, apps=apps, keys=keys) as running:
        log = running.output()
        assert "broken.yml" in log and "keyless.yml" in log and "FIRSTGATE_APP_KEY_KEYLESS" in log
        with running.key_client("story") as http:
            assert http.get("/v1/info").status_code == 200
        with httpx.Client(
            base_url=running.url, headers={"Authorization": f"Bearer {keys['broken']}"}
        ) as http:
            _error(http.get("/v1/info"), 401, "unauthorized")


def test_an_app_whose_model_is_down_fails_alone(model: str, tmp_path: Path) -> None:
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "story.yml").write_text((APPS / "story.yml").read_text())
    down = (APPS / "story.yml").read_text().replace("provider: local", "provider: down")
    (apps / "down.yml").write_text(down)
    with socket.socket() as closed_port:
        closed_port.bind(("127.0.0.1", 0))
        dead = closed_port.getsockname()[1]
    settings = tmp_path / "two-routes.yaml"
    keys = {"story": KEYS["story"], "down": "down-key-0123456789"}
    settings.write_text(
        f"providers:\n  local: {{kind: openai-compatible, base_url: {model}}}\n"
        f"  down: {{kind: openai-compatible, base_url: http://127.0.0.1:{dead}/v1}}\ndefault: local\n"
    )
    with serve(tmp_path, model, apps=apps, keys=keys, extra=("--models", str(settings))) as running:
        results: dict[str, dict] = {}

        def call(app: str, key: str) -> None:
            with httpx.Client(
                base_url=running.url, headers={"Authorization": f"Bearer {key}"}, timeout=60
            ) as http:
                body = {"inputs": {"topic": "[medium] x"}, "user": "u", "response_mode": "blocking"}
                results[app] = http.post("/v1/workflows/run", json=body).json()

        threads = [threading.Thread(target=call, args=item) for item in keys.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert results["down"]["data"]["status"] == "failed"
    assert results["story"]["data"]["status"] == "succeeded"


# ---- shutdown


def test_sigterm_drains_then_stops_what_is_left_and_records_it(model: str, tmp_path: Path) -> None:
    with (
        serve(tmp_path, model, extra=("--grace", "1")) as running,
        running.key_client("story") as http,
    ):
        short = {"inputs": {"topic": "quick"}, "user": "u", "response_mode": "streaming"}
        long = {"inputs": {"topic": "[slow] long"}, "user": "u", "response_mode": "streaming"}
        with http.stream("POST", "/v1/workflows/run", json=long) as reply:
            frames = _events(reply)
            started = next(f for f in frames if f != "ping")
            run_id = started["workflow_run_id"]
            next(f for f in frames if f != "ping" and f["event"] == "text_chunk")
            running.process.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            with pytest.raises(httpx.TransportError):  # no new connections once draining
                httpx.post(f"{running.url}/v1/workflows/run", json=short, timeout=2)
            rest = [f for f in frames if f != "ping"]
        assert rest[-1]["event"] == "workflow_finished"
        assert rest[-1]["data"]["status"] == "stopped"
        assert running.process.wait(timeout=30) == 0
    from firstgate.store import open_store

    store = open_store(str(tmp_path / "state.db"))
    record = store.run(run_id)
    store.close()
    assert record is not None and record.status == "stopped"
    text = record.nodes[-1].outputs.get("partial_text") or json.dumps(record.nodes[-1].outputs)
    assert "w0" in text or record.nodes[-1].status == "stopped"


def test_the_production_command_serves_under_gunicorns_gevent_worker(
    model: str, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    from tests.serve_support import ROOT, models_file

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "FIRSTGATE_APPS_DIR": str(APPS),
        "FIRSTGATE_MODELS": str(models_file(tmp_path, model)),
        "FIRSTGATE_STATE": str(tmp_path / "state.db"),
        "FIRSTGATE_BIND": f"127.0.0.1:{port}",
        "FIRSTGATE_GRACE": "2",
        **{f"FIRSTGATE_APP_KEY_{stem.upper()}": key for stem, key in KEYS.items()},
    }
    gunicorn = Path(sys.executable).with_name("gunicorn")
    command = [
        str(gunicorn),
        "-c",
        "python:firstgate.serve.gunicorn_conf",
        "firstgate.serve.wsgi:application()",
    ]
    log = (tmp_path / "gunicorn.log").open("w")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "gunicorn.log"
                ).read_text()
                time.sleep(0.1)
        headers = {"Authorization": f"Bearer {KEYS['story']}"}
        body = {"inputs": {"topic": "from gunicorn"}, "user": "u", "response_mode": "streaming"}
        with httpx.stream("POST", url + "/v1/workflows/run", json=body, headers=headers) as reply:
            events = [f for f in _events(reply) if f != "ping"]
        assert events[-1]["data"]["status"] == "succeeded"
        assert events[-1]["data"]["outputs"]["text"] == "echo: from gunicorn"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        log.close()


def _children(pid: int) -> set[int]:
    """Every descendant of a process (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_leaves_no_child_process(model: str, tmp_path: Path) -> None:
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "adder.yml").write_text(
        (Path(__file__).parents[1] / "fixtures" / "workflows" / "code_add_one.yml").read_text()
    )
    keys = {"adder": "adder-key-0123456789"}
    with serve(tmp_path, model, apps=apps, keys=keys) as running:
        headers = {"Authorization": f"Bearer {keys['adder']}"}
        body = {"inputs": {"count": 41}, "user": "u", "response_mode": "blocking"}
        reply = httpx.post(
            running.url + "/v1/workflows/run", json=body, headers=headers, timeout=60
        )
        assert reply.json()["data"]["outputs"] == {"total": 42}, reply.text
        children = _children(running.process.pid)
        assert children  # the code node's sandbox workers
        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(timeout=30) == 0
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in children if _alive(pid)]


def test_the_stream_is_exactly_the_events_of_json(server: Server, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.serve_support import ROOT

    cli = subprocess.run(
        [sys.executable, "-m", "firstgate.serve.cli", "run", str(APPS / "story.yml"), "--json",
         "--input", "topic=same words", "--models", str(tmp_path / "models.yaml"),
         "--state", str(tmp_path / "cli.db")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    printed = [json.loads(line) for line in cli.stdout.splitlines() if line.strip()]
    body = {"inputs": {"topic": "same words"}, "user": "u", "response_mode": "streaming"}
    with (
        server.key_client("story") as http,
        http.stream("POST", "/v1/workflows/run", json=body) as reply,
    ):
        streamed = [f for f in _events(reply) if f != "ping"]

    def shape(event: dict) -> tuple:
        data = event.get("data") or {}
        return (event["event"], tuple(sorted(event)), tuple(sorted(data)), data.get("text"),
                data.get("node_id"), data.get("status"))  # fmt: skip

    assert [shape(e) for e in streamed] == [shape(e) for e in printed]
