"""Every way a stream can end maps onto exactly one typed outcome (real sockets)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from firstgate.plugin_daemon_client import LLMClient, first_token_gate
from firstgate.plugin_daemon_client import errors as E

from tests.fakes import llm_server as fake

MESSAGES = [{"role": "user", "content": "hi"}]
SECRET = "sk-firstgate-PLANTED-7f3a9c"


def client_for(srv: fake.FakeLLMServer, protocol: str = "openai") -> LLMClient:
    if protocol == "openai":
        return LLMClient("openai-compatible", srv.base_url, api_key=SECRET)
    return LLMClient("plugin-daemon", srv.root_url, api_key=SECRET, tenant_id="t1", plugin_id="p/x")


def outcome(
    srv: fake.FakeLLMServer, protocol: str = "openai", **gate: object
) -> BaseException | str:
    try:
        with first_token_gate(**gate):
            return "".join(c.text for c in client_for(srv, protocol).invoke_llm("m", MESSAGES))
    except E.FirstGateError as exc:
        return exc


@pytest.mark.parametrize("protocol", ["openai", "daemon"])
def test_tokens_stream_with_finish_and_usage(protocol: str) -> None:
    with fake.FakeLLMServer([fake.tokens(["Hel", "lo"])]) as srv:
        chunks = list(client_for(srv, protocol).invoke_llm("m", MESSAGES))
    assert "".join(c.text for c in chunks) == "Hello"
    assert [c.finish_reason for c in chunks if c.finish_reason] == ["stop"]
    usage = [c.usage for c in chunks if c.usage]
    assert usage and usage[-1].completion_tokens == 2


def test_openai_request_shape() -> None:
    with fake.FakeLLMServer([fake.tokens(["x"])]) as srv:
        list(client_for(srv).invoke_llm("smol", MESSAGES, {"temperature": 0.2}, stop=["\n"]))
        req = srv.requests[0]
    body = req.json()
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {SECRET}"
    assert body["stream"] is True and body["model"] == "smol" and body["temperature"] == 0.2
    assert body["messages"] == MESSAGES and body["stop"] == ["\n"]


def test_plugin_daemon_request_shape() -> None:
    with fake.FakeLLMServer([fake.tokens(["x"])]) as srv:
        client = client_for(srv, "daemon")
        list(client.invoke_llm("gpt-x", MESSAGES, {"temperature": 0.1}, provider="openai"))
        req = srv.requests[0]
    assert req.path == "/plugin/t1/dispatch/llm/invoke"
    assert req.headers["x-api-key"] == SECRET and req.headers["x-plugin-id"] == "p/x"
    data = req.json()["data"]
    assert data["provider"] == "openai" and data["model"] == "gpt-x" and data["model_type"] == "llm"
    assert data["stream"] is True and data["prompt_messages"] == MESSAGES
    assert data["model_parameters"] == {"temperature": 0.1}


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_clean_close_without_token_is_an_empty_response(framing: str) -> None:
    with fake.FakeLLMServer([fake.close_before_token()], framing=framing) as srv:
        result = outcome(srv, first_token_timeout=5)
    assert isinstance(result, E.EmptyResponseError), result
    assert not isinstance(result, E.StreamTimeoutError)


def test_connection_reset_is_a_connection_error_not_success() -> None:
    with fake.FakeLLMServer([fake.reset(after_tokens=2)]) as srv:
        result = outcome(srv, first_token_timeout=5)
    assert isinstance(result, E.ConnectionLostError), result
    assert result.partial_text == "t0 t1 "


def test_oversized_line_is_bounded() -> None:
    with fake.FakeLLMServer([fake.oversized_line(3 << 20)]) as srv:
        result = outcome(srv, first_token_timeout=5)
    assert isinstance(result, E.FrameTooLargeError), result
    assert result.partial_text == "ok "


def test_line_limit_is_configurable() -> None:
    with fake.FakeLLMServer([fake.oversized_line(5000)]) as srv:
        client = LLMClient("openai-compatible", srv.base_url, max_line_bytes=4096)
        with pytest.raises(E.FrameTooLargeError, match="4096"):
            list(client.invoke_llm("m", MESSAGES))


def test_malformed_json_quotes_a_short_excerpt() -> None:
    with fake.FakeLLMServer([fake.malformed_json()]) as srv:
        result = outcome(srv)
    assert isinstance(result, E.MalformedFrameError), result
    assert "oops" in str(result)


def test_body_that_is_not_sse_names_the_content_type() -> None:
    with fake.FakeLLMServer([fake.not_sse()]) as srv:
        result = outcome(srv)
    assert isinstance(result, E.UnexpectedContentTypeError), result
    assert "application/json" in str(result)


@pytest.mark.parametrize(
    ("status", "cls", "transient"),
    [
        (429, E.RateLimitError, True),
        (401, E.AuthorizationError, False),
        (400, E.BadRequestError, False),
        (503, E.ServerUnavailableError, True),
        (500, E.InvokeServerError, True),
    ],
)
def test_http_error_status_maps_to_typed_error(status: int, cls: type, transient: bool) -> None:
    with fake.FakeLLMServer([fake.http_error(status, headers={"Retry-After": "3"})]) as srv:
        result = outcome(srv)
    assert type(result) is cls
    assert result.status == status and result.transient is transient
    assert result.retry_after_s == 3.0
    assert f"fake error {status}" in str(result)


@pytest.mark.parametrize(
    ("error_type", "cls"),
    [
        ("InvokeRateLimitError", E.RateLimitError),
        ("InvokeAuthorizationError", E.AuthorizationError),
        ("InvokeBadRequestError", E.BadRequestError),
        ("InvokeConnectionError", E.InvokeConnectionError),
        ("InvokeServerUnavailableError", E.ServerUnavailableError),
        ("SomethingElse", E.InvokeServerError),
    ],
)
def test_plugin_daemon_error_envelope_is_decoded(error_type: str, cls: type) -> None:
    with fake.FakeLLMServer([fake.dify_error(error_type, "provider says no")]) as srv:
        result = outcome(srv, "daemon")
    assert type(result) is cls, result
    assert "provider says no" in str(result)


def test_plugin_daemon_http_error_with_envelope_body() -> None:
    inner = json.dumps({"error_type": "PluginDaemonUnauthorizedError", "message": "bad key"})
    body = json.dumps({"code": -401, "message": inner, "data": None}).encode()
    with fake.FakeLLMServer([fake.http_error(401, body=body)]) as srv:
        result = outcome(srv, "daemon")
    assert isinstance(result, E.AuthorizationError) and "bad key" in str(result)


def test_no_credential_in_messages_or_reprs() -> None:
    echo = {"error": {"message": f"invalid key {SECRET} for this model", "code": 401}}
    with fake.FakeLLMServer([fake.http_error(401, body=echo)]) as srv:
        result = outcome(srv)
        client = client_for(srv)
    with fake.FakeLLMServer(
        [fake.dify_error("InvokeAuthorizationError", f"key {SECRET} rejected")]
    ) as srv:
        daemon_result = outcome(srv, "daemon")
    for text in (str(result), repr(result), str(daemon_result), repr(daemon_result), repr(client)):
        assert SECRET not in text
    assert "***" in str(result)


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_cancel_unblocks_a_blocked_read_and_is_reported_as_cancel(framing: str) -> None:
    """No deadline at all: only the socket shutdown can unblock this read."""
    with fake.FakeLLMServer([fake.stall_after(2, seconds=10)], framing=framing) as srv:
        client = client_for(srv)
        box: dict[str, object] = {}

        def consume() -> None:
            try:
                with first_token_gate() as gate:
                    box["gate"] = gate
                    for _chunk in client.invoke_llm("m", MESSAGES):
                        box.setdefault("first", time.monotonic())
            except BaseException as exc:  # noqa: BLE001 - recorded for the assertions
                box["error"] = exc
                box["ended"] = time.monotonic()

        worker = threading.Thread(target=consume)
        worker.start()
        deadline = time.monotonic() + 5
        while "first" not in box and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # the reader is now blocked on the stalled socket
        cancelled_at = time.monotonic()
        box["gate"].cancel("user pressed stop")  # type: ignore[attr-defined]
        worker.join(5)
    error = box.get("error")
    assert isinstance(error, E.StreamCancelledError), error
    assert box["ended"] - cancelled_at < 1.0  # type: ignore[operator]
    assert error.partial_text == "t0 t1 " and "user pressed stop" in str(error)


def test_cancel_before_the_request_starts_stops_it() -> None:
    with fake.FakeLLMServer([fake.tokens(["never"])]) as srv:
        with pytest.raises(E.StreamCancelledError):
            with first_token_gate() as gate:
                gate.cancel("aborted early")
                list(client_for(srv).invoke_llm("m", MESSAGES))


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_transport_turns_eof_after_our_shutdown_into_the_recorded_reason(framing: str) -> None:
    """The socket-level backstop alone, under plain httpx iteration (no SSE decoder)."""
    import httpx
    from firstgate.plugin_daemon_client import GatedTransport
    from firstgate.plugin_daemon_client.gate import GateTripped

    with fake.FakeLLMServer([fake.stall_after(1, seconds=10)], framing=framing) as srv:
        http = httpx.Client(transport=GatedTransport())
        with first_token_gate() as gate:
            with http.stream("POST", f"{srv.base_url}/chat/completions", json={}) as response:
                parts = response.iter_raw()
                next(parts)
                threading.Timer(0.2, gate.cancel, args=("stop",)).start()
                with pytest.raises(GateTripped) as info:
                    for _ in parts:
                        pass
    assert isinstance(info.value.error, E.StreamCancelledError)


def test_cancel_after_the_last_token_is_still_a_cancel() -> None:
    """Everything already buffered: no further socket read happens, the decoder's end check decides."""
    with fake.FakeLLMServer([fake.tokens(["only"])]) as srv:
        with first_token_gate() as gate:
            stream = client_for(srv).invoke_llm("m", MESSAGES)
            first = next(stream)
            assert first.text == "only"
            time.sleep(0.2)  # the finish frame and [DONE] are in the buffer by now
            gate.cancel("too late to matter?")
            with pytest.raises(E.StreamCancelledError):
                list(stream)


def test_an_error_frame_mid_stream_keeps_what_had_arrived() -> None:
    def frame(doc: object) -> bytes:
        return b"data: " + json.dumps(doc).encode() + b"\n\n"

    def scenario(conn: fake.Conn) -> None:
        conn.send_headers()
        conn.token("warm ")  # the shape is learned: the next tokens could take the fast path
        conn.sleep(0.05)
        token = {"choices": [{"index": 0, "delta": {"content": "half "}, "finish_reason": None}]}
        error = {"error": {"code": 503, "message": "model unloaded"}}
        conn.send(frame(token) + frame(token) + frame(error))  # one write, one read
        conn.end()

    delivered: list[str] = []
    with fake.FakeLLMServer([scenario]) as srv:
        with pytest.raises(E.ServerUnavailableError) as info:
            with first_token_gate(first_token_timeout=5):
                for chunk in client_for(srv).invoke_llm("m", MESSAGES):
                    delivered.append(chunk.text)
    result = info.value
    assert "".join(delivered) == "warm half half "  # nothing that arrived is lost
    assert result.partial_text == "warm half half " and result.tokens == 3
    assert "model unloaded" in str(result)
