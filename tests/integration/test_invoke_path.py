"""The one invoke path over real sockets: non-streamed calls under the gate,
tool calls in the request and assembled from their streamed pieces, a JSON
schema as the response format or in the prompt, fallback and sinks."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from firstgate.common.cancel import CancelToken
from firstgate.plugin_daemon_client import LLMClient
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.invoke import CallBudgets, ModelRequest, Sinks, invoke
from firstgate.plugin_daemon_client.plan import RoutePlan, RouteTarget
from firstgate.plugin_daemon_client.protocols import ToolSpec

from tests.fakes import llm_server as fake
from tests.fakes import model_answers as ma

CLOCK = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}
TOOL = ToolSpec("clock", "The time in a zone", CLOCK)


@pytest.fixture(autouse=True)
def _no_budget_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRSTGATE_FIRST_TOKEN_TIMEOUT_S", raising=False)
    monkeypatch.delenv("FIRSTGATE_FIRST_TOKEN_CEILING_S", raising=False)


@contextmanager
def route(
    *scenarios: fake.Scenario, kind: str = "openai-compatible", json_schema: bool = True
) -> Iterator[tuple[fake.FakeLLMServer, RoutePlan]]:
    with fake.FakeLLMServer(list(scenarios)) as srv:
        if kind == "openai-compatible":
            client = LLMClient(kind, srv.base_url)
        else:
            client = LLMClient(kind, srv.root_url, "daemon-key", "tenant", "plugin")
        with client:
            target = RouteTarget("r", client, srv.base_url, json_schema=json_schema)
            yield srv, RoutePlan(target)


def request(**kw: Any) -> ModelRequest:
    messages = kw.pop("messages", [{"role": "user", "content": "what time is it?"}])
    return ModelRequest("m", messages, **kw)


def sent(srv: fake.FakeLLMServer, n: int = 0) -> dict[str, Any]:
    return json.loads(srv.requests[n].body)


# --- non-streamed calls -----------------------------------------------------------


def test_a_non_streamed_call_asks_for_one_body_and_reads_it() -> None:
    with route(ma.answer('{"ok": true}')) as (srv, plan):
        reply = invoke(plan, request(stream=False), Sinks())
    body = sent(srv)
    assert body["stream"] is False and "stream_options" not in body
    assert srv.requests[0].headers["accept"] == "application/json"
    assert reply.text == '{"ok": true}' and reply.finish_reason == "stop"
    assert reply.usage is not None and reply.usage.total_tokens == 19


def test_a_body_that_never_starts_is_a_first_token_timeout() -> None:
    with route(ma.answer("late", delay=5.0)) as (_, plan):
        budgets = CallBudgets(first_token_s=0.3)
        with pytest.raises(E.FirstTokenTimeoutError):
            invoke(plan, request(stream=False, budgets=budgets), Sinks())


def test_headers_alone_do_not_meet_the_first_token_deadline() -> None:
    with route(ma.headers_then_body_after(5.0)) as (_, plan):
        with pytest.raises(E.FirstTokenTimeoutError):
            invoke(plan, request(stream=False, budgets=CallBudgets(first_token_s=0.3)), Sinks())


def test_the_first_byte_of_the_body_meets_the_first_token_deadline() -> None:
    # The body starts at once, then takes about 1 s: longer than the budget.
    with route(ma.body_then_trickle(b"{", 0.1, 10)) as (_, plan):
        reply = invoke(plan, request(stream=False, budgets=CallBudgets(first_token_s=0.3)), Sinks())
    assert reply.text == "late"


def test_the_stream_cap_bounds_the_whole_non_streamed_call() -> None:
    with route(ma.body_then_trickle(b"{", 0.1, 100)) as (_, plan):
        budgets = CallBudgets(first_token_s=5.0, stream_total_s=0.5)
        with pytest.raises(E.StreamTotalTimeoutError):
            invoke(plan, request(stream=False, budgets=budgets), Sinks())


def test_a_non_streamed_body_cut_short_is_a_truncated_body() -> None:
    def cut(conn: fake.Conn) -> None:
        conn.send_headers(content_type="application/json")
        conn.send(b'{"choices": [{"message": {"content": "par')
        conn.end()

    with route(cut) as (_, plan), pytest.raises(E.TruncatedBodyError):
        invoke(plan, request(stream=False), Sinks())


def test_an_empty_non_streamed_body_is_an_empty_response() -> None:
    def empty(conn: fake.Conn) -> None:
        conn.send_headers(content_type="application/json")
        conn.end()

    with route(empty) as (_, plan), pytest.raises(E.EmptyResponseError):
        invoke(plan, request(stream=False), Sinks())


def test_an_error_object_in_a_non_streamed_body_is_typed() -> None:
    def error(conn: fake.Conn) -> None:
        conn.send_headers(content_type="application/json")
        conn.send(json.dumps({"error": {"message": "no such model", "code": 404}}).encode())
        conn.end()

    with route(error) as (_, plan), pytest.raises(E.BadRequestError):
        invoke(plan, request(stream=False), Sinks())


# --- tool calls -------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole-body"])
def test_openai_tool_calls_go_out_as_tools_and_come_back_whole(stream: bool) -> None:
    calls = [ma.Call("clock", {"zone": "Asia/Tokyo"}), ma.Call("clock", {"zone": "UTC"})]
    with route(ma.answer("", calls, pieces=4)) as (srv, plan):
        reply = invoke(plan, request(tools=(TOOL,), tool_choice="auto", stream=stream), Sinks())
    body = sent(srv)
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "clock", "description": "The time in a zone", "parameters": CLOCK},
        }
    ]
    assert body["tool_choice"] == "auto"
    assert [(c.id, c.name, c.parsed_arguments()) for c in reply.tool_calls] == [
        ("call_1", "clock", {"zone": "Asia/Tokyo"}),
        ("call_2", "clock", {"zone": "UTC"}),
    ]
    assert reply.finish_reason == "tool_calls" and reply.text == ""


def test_the_tools_schemas_count_in_the_prompt_behind_the_first_token_budget() -> None:
    # A server reads the tools' schemas before it answers: the formula's budget grows.
    with route(ma.answer("noon"), ma.answer("noon")) as (_, plan):
        bare = invoke(plan, request(), Sinks())
        tooled = invoke(plan, request(tools=(TOOL,)), Sinks())
    assert tooled.prompt_tokens > bare.prompt_tokens
    assert tooled.budgets["r"].prompt_tokens == tooled.prompt_tokens


def test_a_streamed_tool_call_counts_as_the_first_token() -> None:
    def slow_arguments(conn: fake.Conn) -> None:
        conn.send_headers()
        conn.frame(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [{"index": 0, "id": "c", "function": {"name": "clock"}}]
                        },
                        "finish_reason": None,
                    }
                ]
            }
        )
        for piece in ('{"zone"', ': "UTC"}'):
            conn.sleep(0.4)
            conn.frame(
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [{"index": 0, "function": {"arguments": piece}}]
                            },
                            "finish_reason": None,
                        }
                    ]
                }
            )
        conn.finish("tool_calls")
        conn.end()

    with route(slow_arguments) as (_, plan):
        reply = invoke(
            plan, request(tools=(TOOL,), budgets=CallBudgets(first_token_s=0.3)), Sinks()
        )
    assert reply.tool_calls[0].parsed_arguments() == {"zone": "UTC"}


def test_the_daemon_gets_dify_tools_and_answers_whole_calls() -> None:
    with route(
        ma.answer("", [ma.Call("clock", {"zone": "UTC"}, id="x1")]), kind="plugin-daemon"
    ) as (
        srv,
        plan,
    ):
        reply = invoke(plan, request(tools=(TOOL,)), Sinks())
    data = sent(srv)["data"]
    assert data["tools"] == [
        {"name": "clock", "description": "The time in a zone", "parameters": CLOCK}
    ]
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("x1", "clock", '{"zone": "UTC"}')
    ]


def test_tool_results_travel_as_tool_messages() -> None:
    messages = [
        {"role": "user", "content": "time?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
    ]
    with route(ma.answer("noon")) as (srv, plan):
        reply = invoke(plan, request(messages=messages, tools=(TOOL,)), Sinks())
    assert sent(srv)["messages"] == messages and reply.text == "noon"


# --- a JSON schema --------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_a_schema_goes_out_as_the_response_format_where_the_server_takes_it() -> None:
    with route(ma.answer('{"n": 1}')) as (srv, plan):
        invoke(plan, request(json_schema=SCHEMA, schema_in_prompt=True), Sinks())
    body = sent(srv)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": SCHEMA},
    }
    assert body["messages"] == [{"role": "user", "content": "what time is it?"}]


def test_a_schema_goes_into_the_prompt_where_the_server_cannot_take_it() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "n?"}]
    with route(ma.answer('{"n": 1}'), json_schema=False) as (srv, plan):
        invoke(plan, request(messages=messages, json_schema=SCHEMA, schema_in_prompt=True), Sinks())
    body = sent(srv)
    assert "response_format" not in body
    system = body["messages"][0]
    assert system["role"] == "system" and system["content"].endswith("\n\nBe brief.")
    assert json.dumps(SCHEMA) in system["content"]
    assert body["messages"][1:] == messages[1:]


def test_a_node_whose_prompt_spells_the_shape_gets_no_second_instruction() -> None:
    with route(ma.answer('{"n": 1}'), json_schema=False) as (srv, plan):
        invoke(plan, request(json_schema=SCHEMA), Sinks())
    assert sent(srv)["messages"] == [{"role": "user", "content": "what time is it?"}]


def test_the_daemon_gets_the_schema_as_dify_hands_it_to_model_plugins() -> None:
    with route(ma.answer('{"n": 1}'), kind="plugin-daemon") as (srv, plan):
        invoke(plan, request(json_schema=SCHEMA, parameters={"temperature": 0}), Sinks())
    params = sent(srv)["data"]["model_parameters"]
    assert params["response_format"] == "json_schema" and params["temperature"] == 0
    assert json.loads(params["json_schema"]) == {"schema": SCHEMA, "name": "llm_response"}


# --- sinks and the plan ------------------------------------------------------------------


def test_text_chunks_reach_the_chunk_sink_with_the_target() -> None:
    seen: list[tuple[str, str | None]] = []
    with route(ma.answer("hello world", pieces=3)) as (_, plan):
        reply = invoke(
            plan, request(), Sinks(chunk=lambda t, target=None: seen.append((t, target)))
        )
    assert "".join(t for t, _ in seen) == "hello world" == reply.text
    assert {target for _, target in seen} == {"r"}
    assert reply.process_data()["route"] == "r"


@pytest.mark.parametrize("kind", ["openai-compatible", "plugin-daemon"])
def test_text_is_mended_before_anyone_sees_it(kind: str) -> None:
    # One emoji split between two frames (half a surrogate pair in each JSON
    # string), a lone half, a NUL, and a half at the very end.
    pieces = ["smile ", "\ud83d", "\ude00", " half \udfff", " nul \x00", " end \ud83d"]
    seen: list[str] = []
    with route(fake.tokens(pieces), kind=kind) as (_, plan):
        reply = invoke(plan, request(), Sinks(chunk=lambda t, target=None: seen.append(t)))
    assert reply.text == "smile \U0001f600 half \ufffd nul \ufffd end \ufffd"
    assert "".join(seen) == reply.text
    reply.text.encode()  # the store and the wire take it


def test_the_cancel_token_shuts_the_call_down() -> None:
    token = CancelToken()
    # Without the cancel the server would answer "late" after 10 s.
    with route(ma.answer("late", delay=10.0)) as (_, plan):
        threading.Timer(0.2, token.cancel, args=("stop",)).start()
        with pytest.raises(E.StreamCancelledError):
            invoke(plan, request(stream=False), Sinks(cancel=token))


def test_a_fallback_target_answers_when_the_first_times_out() -> None:
    events: list[Any] = []
    with (
        fake.FakeLLMServer(ma.answer("late", delay=5.0)) as slow,
        fake.FakeLLMServer(ma.answer('{"n": 2}')) as good,
        LLMClient("openai-compatible", slow.base_url) as a,
        LLMClient("openai-compatible", good.base_url) as b,
    ):
        plan = RoutePlan(
            RouteTarget(
                "a", a, "http://10.9.9.1/v1", budget_settings={"first_token_timeout_s": 0.3}
            ),
            (RouteTarget("b", b, "http://10.9.9.2/v1"),),
        )
        reply = invoke(plan, request(stream=False), Sinks(fallback=events.append))
    assert reply.text == '{"n": 2}' and reply.route == "b"
    assert reply.failures == (("a", "FirstTokenTimeoutError"),)
    assert [e.kind for e in events if e.kind == "swap"] == ["swap"]
    assert set(reply.process_data()["first_token_budget"]) == {"a", "b"}
