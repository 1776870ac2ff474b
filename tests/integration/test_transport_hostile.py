"""What a hostile or broken model server does to the transport (issue 12), over real sockets.

Each test names the failure it guards: a key echoed back mid-stream, a reply
that never ends growing, a server that never reads the request, a redirect,
an error body that trickles, a body cut by its Content-Length, a bad byte.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from firstgate.plugin_daemon_client import LLMClient, first_token_gate
from firstgate.plugin_daemon_client import client as client_module
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.errors import Trip

from tests.fakes import llm_server as fake
from tests.integration.test_cli import firstgate, lines

MESSAGES = [{"role": "user", "content": "hi"}]
SECRET = "sk-hostile/KEY+planted=9d2e"
ROOT = Path(__file__).resolve().parents[2]


def client(srv: fake.FakeLLMServer, **kw: object) -> LLMClient:
    return LLMClient("openai-compatible", srv.base_url, api_key=SECRET, **kw)  # type: ignore[arg-type]


def failure(
    srv: fake.FakeLLMServer, *, texts: list[str] | None = None, **gate: object
) -> E.FirstGateError:
    with pytest.raises(E.FirstGateError) as info:
        with first_token_gate(**gate):
            for chunk in client(srv).invoke_llm("m", MESSAGES):
                if texts is not None:
                    texts.append(chunk.text)
    return info.value


def everything_shown(error: BaseException) -> str:
    """Every way an error reaches a person or a log."""
    return "\n".join(
        [
            str(error),
            repr(error),
            json.dumps(getattr(error, "params", {}), default=str),
            "".join(traceback.format_exception(error)),
        ]
    )


# --- secrets ------------------------------------------------------------------------------


def echoing_error_frame(message: str) -> fake.Scenario:
    """A token, then an OpenAI error frame mid-stream that quotes `message`."""

    def run(conn: fake.Conn) -> None:
        conn.send_headers()
        conn.token("partial ")
        conn.frame({"error": {"message": message, "code": 401}})
        conn.end()

    return run


ECHOES = {
    "bearer": f"upstream rejected Bearer {SECRET} for model m",
    "basic": "upstream rejected Authorization: Basic "
    + base64.b64encode(f"user:{SECRET}".encode()).decode(),
    "url-encoded": f"GET /v1?key={quote(SECRET, safe='')} refused",
    "url-encoded-lower-hex": "key="
    + re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(SECRET, safe=""))
    + " refused",
    "json-escaped": "body was " + json.dumps({"key": SECRET}).replace("/", "\\/"),
    "base64-alone": "token " + base64.b64encode(SECRET.encode()).decode(),
    "base64-urlsafe": "token " + base64.urlsafe_b64encode(b"xy" + SECRET.encode()).decode(),
}


@pytest.mark.parametrize("echo", list(ECHOES.values()), ids=list(ECHOES))
def test_an_error_frame_mid_stream_never_shows_the_key(echo: str) -> None:
    with fake.FakeLLMServer([echoing_error_frame(echo)]) as srv:
        error = failure(srv)
    assert isinstance(error, E.AuthorizationError)
    assert error.partial_text == "partial "
    shown = everything_shown(error)
    assert SECRET not in shown and quote(SECRET, safe="") not in shown
    assert base64.b64encode(SECRET.encode()).decode()[:12] not in shown
    assert "***" in str(error)
    assert echo[:4] in str(error)  # the rest of the server's message is kept


def test_an_echoed_basic_authorization_is_masked_whole() -> None:
    with fake.FakeLLMServer([echoing_error_frame(ECHOES["basic"])]) as srv:
        error = failure(srv)
    # Not only the key's bytes: nothing of the encoded credentials is left to decode.
    assert str(error).endswith("Authorization: Basic ***")


def test_the_cli_never_prints_the_key_from_an_error_frame(tmp_path: Path) -> None:
    models = tmp_path / "models.yaml"
    with fake.FakeLLMServer([echoing_error_frame(ECHOES["bearer"])]) as srv:
        models.write_text(
            json.dumps(
                {
                    "providers": {
                        "fake": {
                            "kind": "openai-compatible",
                            "base_url": srv.base_url,
                            "api_key_env": "FG_HOSTILE_KEY",
                        }
                    },
                    "default": "fake",
                }
            ),
            encoding="utf-8",
        )
        flow = str(ROOT / "examples" / "chat.yml")
        env = {"FG_HOSTILE_KEY": SECRET}
        as_json = firstgate(
            "run", flow, "-i", "query=x", "--models", str(models), "--json", env=env
        )
        human = firstgate("run", flow, "-i", "query=x", "--models", str(models), env=env)
    for result in (as_json, human):
        assert result.returncode == 1, result.stderr
        assert SECRET not in result.stdout + result.stderr
    failed = [
        e
        for e in lines(as_json.stdout)
        if e["event"] == "workflow_finished" and e["data"]["status"] == "failed"
    ]
    assert failed and "***" in failed[0]["data"]["error"]
    assert "rejected the credentials" in human.stderr + human.stdout


@pytest.mark.parametrize(
    "base_url", ["http://user:pw-secret@127.0.0.1:9/v1", "http://only-user@127.0.0.1:9/v1"]
)
def test_credentials_in_base_url_are_refused_by_the_client(base_url: str) -> None:
    with pytest.raises(E.ClientConfigError) as info:
        LLMClient("openai-compatible", base_url)
    assert "pw-secret" not in everything_shown(info.value)
    assert info.value.message_key == "errors.config.baseUrlCredentials"


@pytest.mark.parametrize("key", ["a", "abc"])
def test_keys_too_short_to_redact_are_refused(key: str) -> None:
    with pytest.raises(E.ClientConfigError) as info:
        LLMClient("openai-compatible", "http://127.0.0.1:9/v1", api_key=key)
    assert info.value.params == {"min": 4}


# --- the reply's size ------------------------------------------------------------------------


def huge_frames(count: int, size: int) -> fake.Scenario:
    def run(conn: fake.Conn) -> None:
        conn.send_headers()
        for _ in range(count):
            conn.token("x" * size)
        conn.finish()
        conn.end()

    return run


def test_a_reply_past_its_size_cap_is_a_typed_error_with_the_progress() -> None:
    texts: list[str] = []
    with fake.FakeLLMServer([huge_frames(400, 100_000)]) as srv:
        with pytest.raises(E.ReplyTooLargeError) as info:
            for chunk in client(srv, max_reply_bytes=1_000_000).invoke_llm("m", MESSAGES):
                texts.append(chunk.text)
    error = info.value
    assert not error.transient
    assert 0 < error.tokens < 12 and error.partial_text == "".join(texts)
    assert len(error.partial_text) <= 1_000_000
    assert error.params["limit"] == 1_000_000 and "max_reply_bytes" in str(error)


def test_the_default_cap_lets_a_normal_reply_through() -> None:
    with fake.FakeLLMServer([huge_frames(30, 10_000)]) as srv:
        text = "".join(c.text for c in client(srv).invoke_llm("m", MESSAGES))
    assert len(text) == 300_000


# --- the request write is inside the first-token deadline -------------------------------------


@contextmanager
def never_reads() -> Iterator[str]:
    """A server that accepts connections and never reads a byte (nor answers)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        listener.close()


def test_a_server_that_never_reads_fires_at_the_first_token_budget() -> None:
    prompt = [{"role": "user", "content": "x" * 8_000_000}]
    with never_reads() as base_url:
        llm = LLMClient("openai-compatible", base_url, timeout=httpx.Timeout(30.0))
        start = time.monotonic()
        with pytest.raises(E.FirstTokenTimeoutError) as info:
            with first_token_gate(first_token_timeout=0.5) as gate:
                list(llm.invoke_llm("m", prompt))
        took = time.monotonic() - start
    assert gate.fired is Trip.FIRST_TOKEN  # the gate's deadline, not httpx's write timeout
    assert info.value.params["budget"] == "0.5"
    assert "has not answered the request yet" in str(info.value)
    assert took < 10  # the budget bounds the write (httpx's own write timeout is 30 s here)


def test_the_attempt_cap_bounds_the_write_too() -> None:
    prompt = [{"role": "user", "content": "x" * 8_000_000}]
    with never_reads() as base_url:
        llm = LLMClient("openai-compatible", base_url, timeout=httpx.Timeout(30.0))
        with pytest.raises(E.AttemptCapError):
            with first_token_gate() as gate:
                gate.cap_attempt(0.4, "primary")
                list(llm.invoke_llm("m", prompt))
    assert gate.fired is Trip.ATTEMPT_CAP


# --- misleading labels ------------------------------------------------------------------------


def redirect(status: int, location: str) -> fake.Scenario:
    def run(conn: fake.Conn) -> None:
        conn.send_headers(status=status, content_type="text/plain", extra={"Location": location})
        conn.end()

    return run


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_its_own_non_transient_error(status: int) -> None:
    location = f"http://elsewhere.example/v1/chat/completions?key={SECRET}"
    with fake.FakeLLMServer([redirect(status, location)]) as srv:
        error = failure(srv, first_token_timeout=5)
        assert len(srv.requests) == 1  # not followed
    assert isinstance(error, E.RedirectError) and not error.transient
    assert error.status == status and "elsewhere.example" in str(error)
    assert SECRET not in everything_shown(error)


def trickling_error(status: int, seconds: float) -> fake.Scenario:
    def run(conn: fake.Conn) -> None:
        conn.send_headers(status=status, content_type="text/plain")
        body = b"upstream exploded" + b"." * 200
        for byte in body:
            conn.send(bytes([byte]))
            conn.sleep(seconds / len(body))
        conn.end()

    return run


def test_a_500_whose_body_trickles_is_the_http_error_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_module, "_ERROR_BODY_WAIT_S", 2.0)
    with fake.FakeLLMServer([trickling_error(500, 10.0)]) as srv:
        error = failure(srv, first_token_timeout=0.3)
    assert isinstance(error, E.InvokeServerError), repr(error)
    assert error.status == 500 and error.transient
    assert "upstream" in str(error)  # what arrived of the body is the detail


def short_content_length() -> fake.Scenario:
    def run(conn: fake.Conn) -> None:
        frames = b"".join(
            b"data: " + json.dumps(conn._openai({"content": word})).encode() + b"\n\n"
            for word in ("one ", "two ", "three ")
        )
        conn.send_headers(extra={"Content-Length": str(len(frames) - 25)})
        conn.sock.sendall(frames)
        conn.close()

    return run


def test_a_short_content_length_is_a_truncated_body_not_a_frame_error() -> None:
    with fake.FakeLLMServer([short_content_length()], framing="close") as srv:
        error = failure(srv)
    assert isinstance(error, E.TruncatedBodyError), repr(error)
    assert error.transient and error.partial_text == "one two "
    assert "truncated" in str(error)


def bad_utf8_token() -> fake.Scenario:
    def run(conn: fake.Conn) -> None:
        conn.send_headers()
        conn.token("caf")
        frame = json.dumps(conn._openai({"content": "@@"})).encode().replace(b"@@", b"\xc3(\xff")
        conn.send(b"data: " + frame + b"\n\n")
        conn.token(" ok")
        conn.finish()
        conn.end()

    return run


def test_one_invalid_utf8_sequence_becomes_a_replacement_character() -> None:
    with fake.FakeLLMServer([bad_utf8_token()]) as srv:
        with first_token_gate(first_token_timeout=5):
            text = "".join(c.text for c in client(srv).invoke_llm("m", MESSAGES))
    assert text == "caf\ufffd(\ufffd ok"


def test_the_settings_file_sets_a_routes_reply_cap(tmp_path: Path) -> None:
    models = tmp_path / "models.yaml"
    with fake.FakeLLMServer([huge_frames(50, 10_000)]) as srv:
        route = {"kind": "openai-compatible", "base_url": srv.base_url, "max_reply_bytes": 50_000}
        models.write_text(json.dumps({"providers": {"fake": route}, "default": "fake"}))
        flow = str(ROOT / "examples" / "chat.yml")
        result = firstgate("run", flow, "-i", "query=x", "--models", str(models), "--json")
    assert result.returncode == 1, result.stderr
    failed = [
        e
        for e in lines(result.stdout)
        if e["event"] == "node_finished" and e["data"]["status"] == "failed"
    ]
    assert failed and failed[0]["data"]["error_type"] == "ReplyTooLargeError"
    assert "50000 bytes" in failed[0]["data"]["error"]


def test_a_short_key_is_invalid_input_naming_its_variable(tmp_path: Path) -> None:
    models = tmp_path / "models.yaml"
    route = {"kind": "openai-compatible", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "K"}
    models.write_text(json.dumps({"providers": {"fake": route}, "default": "fake"}))
    result = firstgate(
        "run",
        str(ROOT / "examples" / "chat.yml"),
        "--query",
        "hi",
        "--models",
        str(models),
        env={"K": "abc"},
    )
    assert result.returncode == 2
    assert "K is shorter than 4 characters" in result.stderr and "Traceback" not in result.stderr
