"""The protocols that name their own end (Anthropic, the Responses API, Gemini,
Ollama) against fakes on real loopback sockets, in threads and (second run,
`tests/run_gevent.py`) under gevent: the same scenarios, written once
(`tests/fakes/dialects.py`), for every protocol.

Their lifecycle events and keep-alives never satisfy the first-token deadline;
text, reasoning, usage and the finish reason arrive; every error status and
error event is the right typed error; a stream cut before its end marker, junk,
a huge event and a key echoed back are each handled.
"""

from __future__ import annotations

import time

import pytest
from firstgate.plugin_daemon_client import LLMClient, first_token_gate
from firstgate.plugin_daemon_client import errors as E
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute

from tests import model_flows as mf
from tests.fakes import dialects as sc
from tests.fakes.anthropic_api import ANTHROPIC
from tests.fakes.dialects import Dialect
from tests.fakes.gemini_api import GEMINI
from tests.fakes.llm_server import Conn, FakeLLMServer
from tests.fakes.ollama_api import OLLAMA
from tests.fakes.responses_api import RESPONSES

BUDGET = 0.5
MESSAGES = [{"role": "user", "content": "hi"}]
SECRET = "sk-firstgate-PLANTED-7f3a9c"
DIALECTS = [ANTHROPIC, RESPONSES, OLLAMA, GEMINI]


@pytest.fixture(params=DIALECTS, ids=lambda d: d.kind)
def d(request: pytest.FixtureRequest) -> Dialect:
    return request.param


def client(d: Dialect, srv: FakeLLMServer, **kwargs: object) -> LLMClient:
    return LLMClient(d.kind, d.base_url(srv.root_url), api_key=SECRET, **kwargs)  # type: ignore[arg-type]


def outcome(
    d: Dialect, srv: FakeLLMServer, max_line_bytes: int = 1 << 20, **gate: object
) -> BaseException | str:
    try:
        with first_token_gate(**gate):  # type: ignore[arg-type]
            chunks = client(d, srv, max_line_bytes=max_line_bytes).invoke_llm("m", MESSAGES)
            return "".join(c.text for c in chunks)
    except E.FirstGateError as exc:
        return exc


def timed(d: Dialect, srv: FakeLLMServer, **gate: object) -> tuple[BaseException | str, float]:
    start = time.monotonic()
    result = outcome(d, srv, **gate)
    return result, time.monotonic() - start


def test_text_reasoning_usage_and_finish_reason(d: Dialect) -> None:
    with FakeLLMServer([sc.reply(d, ["Hel", "lo"], think="hmm")]) as srv:
        chunks = list(client(d, srv).invoke_llm("m", MESSAGES))
    assert "".join(c.text for c in chunks) == "Hello"
    assert "".join(c.reasoning for c in chunks) == "hmm"
    assert [c.finish_reason for c in chunks if c.finish_reason] == [d.finish_reason]
    usage = [c.usage for c in chunks if c.usage][-1]
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (5, 2, 7)


def test_keepalives_never_satisfy_the_first_token_deadline(d: Dialect) -> None:
    with FakeLLMServer([sc.keepalives(d, 0.05, 5)]) as srv:
        result, took = timed(d, srv, first_token_timeout=BUDGET)
    assert isinstance(result, E.FirstTokenTimeoutError), result
    assert result.deadline == "first_token" and result.tokens == 0
    assert BUDGET <= took < 2 * BUDGET


def test_keepalives_then_tokens_within_the_budget(d: Dialect) -> None:
    with FakeLLMServer([sc.keepalives(d, 0.05, 0.3, then=["late"])]) as srv:
        assert outcome(d, srv, first_token_timeout=2) == "late"


def test_the_ceiling_ends_a_probing_wait_on_endless_keepalives(d: Dialect) -> None:
    with FakeLLMServer([sc.keepalives(d, 0.05, 10)]) as srv:
        result, took = timed(d, srv, first_token_timeout=0.3, probe=lambda: "busy", ceiling=1.0)
    assert isinstance(result, E.FirstTokenTimeoutError) and result.deadline == "ceiling", result
    assert 1.0 <= took < 2.0


def test_malformed_and_unknown_events_are_ignored(d: Dialect) -> None:
    with FakeLLMServer([sc.junk_then_reply(d, ["a", "b"])]) as srv:
        assert outcome(d, srv, first_token_timeout=5) == "ab"


def test_malformed_and_unknown_events_are_never_a_first_token(d: Dialect) -> None:
    with FakeLLMServer([sc.junk_forever(d, 0.05, 5)]) as srv:
        result, took = timed(d, srv, first_token_timeout=BUDGET)
    assert isinstance(result, E.FirstTokenTimeoutError), result
    assert took < 2 * BUDGET


@pytest.mark.parametrize("tokens", [0, 2])
def test_a_stream_cut_before_its_end_marker_is_an_error(d: Dialect, tokens: int) -> None:
    with FakeLLMServer([sc.truncated(d, tokens)]) as srv:
        result = outcome(d, srv, first_token_timeout=5)
    # Only lifecycle events (or nothing at all: Ollama) and a clean close: never a success.
    expected = E.TruncatedBodyError if tokens or d.kind != "ollama" else E.EmptyResponseError
    assert isinstance(result, expected), result
    assert result.transient and result.partial_text == "t0 t1 "[: 3 * tokens]


def test_an_error_event_mid_stream_is_a_transient_typed_error(d: Dialect) -> None:
    with FakeLLMServer([sc.error_mid_stream(d, "busy now")]) as srv:
        result = outcome(d, srv, first_token_timeout=5)
    assert isinstance(result, E.InvokeError), result
    assert result.transient and "busy now" in str(result)
    assert result.partial_text == "t0 "


def test_an_error_event_carrying_the_key_never_prints_it(d: Dialect) -> None:
    with FakeLLMServer([sc.error_mid_stream(d, f"bad key {SECRET}", tokens=0)]) as srv:
        result = outcome(d, srv, first_token_timeout=5)
    assert isinstance(result, E.InvokeError), result
    for text in (str(result), repr(result), result.render("de-DE")):
        assert SECRET not in text
    assert "***" in str(result)


def test_an_error_status_carrying_the_key_never_prints_it(d: Dialect) -> None:
    with FakeLLMServer([sc.status(d, 401, f"invalid x-api-key {SECRET}")]) as srv:
        result = outcome(d, srv)
    assert isinstance(result, E.AuthorizationError), result
    assert SECRET not in str(result) and SECRET not in repr(result)


STATUSES = [
    (400, E.BadRequestError, False),
    (401, E.AuthorizationError, False),
    (403, E.AuthorizationError, False),
    (429, E.RateLimitError, True),
    (500, E.InvokeServerError, True),
    (503, E.ServerUnavailableError, True),
]


@pytest.mark.parametrize(("code", "cls", "transient"), STATUSES)
def test_error_statuses_are_typed(d: Dialect, code: int, cls: type, transient: bool) -> None:
    with FakeLLMServer([sc.status(d, code, f"fake {code}")]) as srv:
        result = outcome(d, srv)
    assert type(result) is cls, result
    assert result.transient is transient and f"fake {code}" in str(result)


def test_a_line_that_is_not_sse_among_the_events_is_an_error(d: Dialect) -> None:
    if d.media_type != "text/event-stream":
        pytest.skip("NDJSON has no framing to break: a line that is not JSON is ignored")

    def scenario(conn: Conn) -> None:
        d.start(conn)
        # In one write with a token: the line reaches the decoder with the event.
        token = sc.wire_bytes(lambda c: d.token(c, "a"))
        conn.send(token + b"<html>a proxy's error page</html>\n\n")
        d.finish(conn, 1)
        conn.end()

    with FakeLLMServer([scenario]) as srv:
        result = outcome(d, srv, first_token_timeout=5)
    assert isinstance(result, E.MalformedFrameError), result
    assert "proxy" in str(result)


def test_the_line_cap_holds_for_a_whole_line_in_one_read(d: Dialect) -> None:
    def scenario(conn: Conn) -> None:
        d.start(conn)
        d.token(conn, "ok ")
        conn.sleep(0.05)
        d.big_event(conn, 5000)  # with its newline: complete lines in one read

    with FakeLLMServer([scenario]) as srv:
        result = outcome(d, srv, first_token_timeout=5, max_line_bytes=4096)
    assert isinstance(result, E.FrameTooLargeError) and "4096" in str(result), result


def test_silence_while_a_model_loads_is_the_first_token_wait(d: Dialect) -> None:
    with FakeLLMServer([sc.silence_then(d, 5, ["late"])]) as srv:
        result, took = timed(d, srv, first_token_timeout=BUDGET)
    assert isinstance(result, E.FirstTokenTimeoutError), result
    assert not result.progress.headers_received and BUDGET <= took < 2 * BUDGET
    with FakeLLMServer([sc.silence_then(d, 0.3, ["late"])]) as srv:
        assert outcome(d, srv, first_token_timeout=2) == "late"


def test_a_10_mb_event_hits_the_line_cap(d: Dialect) -> None:
    with FakeLLMServer([sc.big_event(d, 10 << 20)]) as srv:
        result = outcome(d, srv, first_token_timeout=5)
    assert isinstance(result, E.FrameTooLargeError), result
    assert result.partial_text == "ok "


def test_a_workflow_llm_node_streams_through_the_gate(
    d: Dialect, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIRSTGATE_TEST_KEY", SECRET)
    data = {
        "type": "llm",
        "title": "Answer",
        "model": dict(mf.MODEL),
        "prompt_template": [{"role": "user", "text": "{{#start.q#}}"}],
        "invocation": {"first_token_timeout_ms": 5000},
    }
    flow = mf.workflow([{"id": "n", "data": data}], [("start", "n", "source")])
    with FakeLLMServer([sc.reply(d, ["Bon", "jour"])]) as srv:
        route = ProviderRoute(
            kind=d.kind, base_url=d.base_url(srv.root_url), api_key_env="FIRSTGATE_TEST_KEY"
        )
        settings = RuntimeSettings(providers={"primary": route})
        events = list(load_workflow(flow, settings=settings).run({"q": "hi"}, settings=settings))
    assert isinstance(mf.final(events), ev.WorkflowSucceeded), mf.final(events)
    (first,) = mf.of(events, ev.NodeFirstToken)
    assert first.node_id == "n" and first.target == "primary"
    (node,) = [e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "n"]
    assert node.outputs["text"] == "Bonjour" and node.outputs["finish_reason"] == d.finish_reason
    assert node.outputs["usage"]["completion_tokens"] == 2
