"""The tool node: Dify's built-in time tools run locally, a plugin's tools go to
a real-socket fake of the plugin daemon, an MCP server's tools to a real MCP
server (the `mcp` package's, in its own process); database-defined providers
are refused at load time by name."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from firstgate.common.problems import DslError
from firstgate.connectors.mcp_client import McpServer
from firstgate.connectors.tool_messages import (
    BlobChunk,
    MessageType,
    ToolError,
    ToolMessage,
    merge_blob_chunks,
    text,
)
from firstgate.connectors.tool_messages import blob as blob_message
from firstgate.connectors.tool_parameters import (
    ParamType,
    ToolParameter,
    ToolParameterError,
    prepare,
)
from firstgate.plugin_daemon_client.tool_dispatch import PluginToolClient, ToolReplyTooLargeError
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev

from tests.connect_support import (
    abort_once,
    chain_flow,
    node_end,
    one_node_flow,
    run_events,
    settings,
)
from tests.fakes import mcp_server
from tests.fakes.plugin_daemon import PIXEL, FakePluginDaemon
from tests.run_events import final

PLUGIN = "langgenius/tavily/tavily"


def tool_flow(
    tool_name: str,
    provider_id: str = "time",
    provider_type: str = "builtin",
    outputs: dict[str, list[str]] | None = None,
    start_variables: list[dict[str, Any]] | None = None,
    **data: Any,
) -> dict[str, Any]:
    fields = {
        "provider_id": provider_id,
        "provider_type": provider_type,
        "provider_name": provider_id,
        "tool_name": tool_name,
        **data,
    }
    return one_node_flow(
        "tool", fields, outputs or {"text": ["n", "text"]}, start_variables=start_variables
    )


def constant(value: Any) -> dict[str, Any]:
    return {"type": "constant", "value": value}


# --- built-in time tools ---------------------------------------------------------------


def test_current_time_with_legacy_and_versioned_settings() -> None:
    legacy = tool_flow(
        "current_time", tool_configurations={"format": "%Z|%Y", "timezone": "Asia/Tokyo"}
    )
    out = final(run_events(legacy)).outputs["text"]
    zone, year = out.split("|")
    assert zone == "JST" and 2024 <= int(year) < 2200
    versioned = tool_flow(
        "current_time",
        tool_node_version="2",
        tool_configurations={"format": constant("%Z"), "timezone": constant("UTC")},
    )
    assert final(run_events(versioned)).outputs["text"] == "UTC"
    # Dify's default format, and an unknown zone answered in text as Dify does
    default = run_events(tool_flow("current_time", tool_configurations={"timezone": "Mars/Base"}))
    assert final(default).outputs["text"] == "Invalid timezone: Mars/Base"


def test_conversions_and_weekday_give_dify_answers() -> None:
    cases = [
        ("timezone_conversion", {
            "current_time": "2024-01-01 00:00:00",
            "current_timezone": "Asia/Shanghai",
            "target_timezone": "Asia/Tokyo",
        }, "2024-01-01 01:00:00"),
        ("localtime_to_timestamp", {"localtime": "2024-01-01 00:00:00", "timezone": "UTC"},
         "1704067200"),
        ("localtime_to_timestamp", {"localtime": "2024-01-01 08:00:00"}, "1704067200"),
        ("timestamp_to_localtime", {"timestamp": "1704067200", "timezone": "Asia/Tokyo"},
         "2024-01-01 09:00:00"),
        ("weekday", {"year": "2024", "month": 2, "day": "29"}, "February 29, 2024 is Thursday."),
        ("weekday", {"year": 2023, "month": 2, "day": 29}, "Invalid date: Year 2023, Month 2, Day 29."),
    ]  # fmt: skip
    for tool, params, expected in cases:
        document = tool_flow(tool, tool_parameters={k: constant(v) for k, v in params.items()})
        assert final(run_events(document)).outputs["text"] == expected, tool


def test_parameters_from_templates_and_variables() -> None:
    inputs = [
        {"variable": "day", "type": "text-input", "label": "day"},
        {"variable": "year", "type": "number", "label": "year"},
    ]
    document = tool_flow(
        "weekday",
        tool_parameters={
            "year": {"type": "variable", "value": ["start", "year"]},
            "month": {"type": "mixed", "value": "1{{#start.day#}}"},
            "day": {"type": "mixed", "value": "{{#start.day#}}"},
        },
        start_variables=inputs,
    )
    events = run_events(document, day="1", year=2025)
    assert final(events).outputs["text"] == "November 1, 2025 is Saturday."
    assert node_end(events).process_data["parameters"] == {"year": 2025, "month": "11", "day": "1"}


def test_a_missing_required_parameter_and_a_bad_zone_go_to_the_error_strategy() -> None:
    document = tool_flow(
        "weekday",
        tool_parameters={"year": constant(2024)},
        error_strategy="default-value",
        default_value=[{"key": "text", "type": "string", "value": "unknown"}],
    )
    events = run_events(document)
    end = node_end(events)
    assert isinstance(end, ev.NodeException)
    assert end.error_type == "ToolParameterError" and "month" in end.error_message
    assert final(events).outputs["text"] == "unknown"
    bad_zone = tool_flow(
        "timezone_conversion",
        tool_parameters={
            "current_time": constant("2024-01-01 00:00:00"),
            "target_timezone": constant("Nowhere/Land"),
        },
    )
    events = run_events(bad_zone)
    assert isinstance(final(events), ev.WorkflowFailed)
    assert "Invalid timezone: 'Nowhere/Land'" in final(events).error_message


def test_parameters_are_cast_by_their_declared_types() -> None:
    declared = [
        ToolParameter("n", ParamType.NUMBER, required=True),
        ToolParameter("f", ParamType.BOOLEAN),
        ToolParameter("items", ParamType.ARRAY),
        ToolParameter("s", ParamType.STRING, default="d"),
    ]
    assert prepare(declared, {"n": "2.5", "f": "no", "items": "[1, 2]"}) == {
        "n": 2.5,
        "f": False,
        "items": [1, 2],
        "s": "d",
    }
    assert prepare(declared, {"n": 7, "items": "x", "s": 3})["items"] == ["x"]
    with pytest.raises(ToolParameterError, match="n must be a number, got 'seven'"):
        prepare(declared, {"n": "seven"})
    with pytest.raises(ToolParameterError, match="parameter n is required"):
        prepare(declared, {})


# --- refused at load time ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["api", "workflow", "app", "dataset-retrieval"])
def test_database_defined_providers_are_refused_by_name(kind: str) -> None:
    with pytest.raises(DslError) as caught:
        load_workflow(tool_flow("lookup", provider_id="crm-api-7", provider_type=kind))
    [problem] = caught.value.problems
    assert "crm-api-7" in problem.render() and f"Dify {kind} tool" in problem.render()
    assert problem.node is not None and problem.node.id == "n"


def test_unknown_builtin_tools_and_providers_are_refused() -> None:
    with pytest.raises(DslError, match="has no tool sundial"):
        load_workflow(tool_flow("sundial"))
    with pytest.raises(DslError, match="Web Scraper is not available here"):
        load_workflow(tool_flow("scrape", provider_id="Web Scraper"))
    with pytest.raises(DslError, match="must be a variable selector"):
        load_workflow(
            tool_flow("weekday", tool_parameters={"year": {"type": "variable", "value": "start.y"}})
        )


def test_selectors_into_tool_outputs_are_checked_where_they_are_known() -> None:
    with pytest.raises(DslError, match="score"):
        load_workflow(tool_flow("current_time", outputs={"x": ["n", "score"]}))
    # a plugin tool may set variables of its own: the selector is taken on trust
    load_workflow(tool_flow("search", provider_id=PLUGIN, outputs={"x": ["n", "score"]}))


# --- the plugin daemon -----------------------------------------------------------------------


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePluginDaemon]:
    monkeypatch.setenv("FG_DAEMON_KEY", "daemon-key-8841")
    monkeypatch.setenv("FG_TAVILY_KEY", "tvly-secret-5150")
    with FakePluginDaemon() as fake:
        yield fake


def daemon_settings(fake: FakePluginDaemon, files: Path | None = None, **tools: Any) -> Any:
    return settings(
        tools={
            "timeout_s": 5,
            "plugin_daemon": {
                "base_url": fake.base_url,
                "tenant_id": "tenant-1",
                "api_key_env": "FG_DAEMON_KEY",
            },
            "providers": {PLUGIN: {"credentials_env": {"tavily_api_key": "FG_TAVILY_KEY"}}},
            **tools,
        },
        files={"dir": str(files)} if files else {},
    )


def plugin_flow(tool: str, params: dict[str, Any] | None = None, **data: Any) -> dict[str, Any]:
    return tool_flow(
        tool,
        provider_id=PLUGIN,
        tool_parameters={k: constant(v) for k, v in (params or {}).items()},
        **data,
    )


def test_plugin_tool_request_shape(daemon: FakePluginDaemon) -> None:
    inputs = [{"variable": "q", "type": "text-input", "label": "q"}]
    document = tool_flow(
        "echo",
        provider_id=PLUGIN,
        tool_parameters={"text": {"type": "mixed", "value": "about {{#start.q#}}"}},
        tool_configurations={"depth": "basic", "unset": None},
        start_variables=inputs,
    )
    events = run_events(document, daemon_settings(daemon), q="rivers")
    assert final(events).outputs == {"text": "about rivers"}
    [request] = daemon.requests
    assert request["path"] == "/plugin/tenant-1/dispatch/tool/invoke"
    assert request["headers"]["X-Api-Key"] == "daemon-key-8841"
    assert request["headers"]["X-Plugin-ID"] == "langgenius/tavily"
    assert request["body"]["data"] == {
        "provider": "tavily",
        "tool": "echo",
        "credentials": {"tavily_api_key": "tvly-secret-5150"},
        "credential_type": "api-key",
        "tool_parameters": {"depth": "basic", "text": "about rivers"},
    }
    text = json.dumps([e.to_dict() for e in events])
    assert "tvly-secret-5150" not in text and "daemon-key-8841" not in text


def test_every_message_kind_becomes_dify_outputs(daemon: FakePluginDaemon, tmp_path: Path) -> None:
    document = plugin_flow(
        "everything",
        outputs={k: ["n", k] for k in ("text", "files", "json", "score", "story")},
    )
    events = run_events(document, daemon_settings(daemon, tmp_path / "produced"))
    out = final(events).outputs
    assert out["text"] == "Hello worldLink: https://example.com/page\n"
    assert out["json"] == [{"answer": 42}]
    assert out["score"] == 0.5 and out["story"] == "once upon"
    remote, image, pdf = out["files"]  # Dify's serialized files
    assert remote["transfer_method"] == "remote_url"
    assert remote["remote_url"] == "https://example.com/cat.png" and remote["type"] == "image"
    assert image["transfer_method"] == "tool_file" and image["mime_type"] == "image/png"
    assert pdf["filename"] == "report.pdf" and pdf["type"] == "document"
    saved = sorted(p.name for p in (tmp_path / "produced").iterdir())
    assert len(saved) == 2 and not any(name.endswith(".part") for name in saved)
    assert (tmp_path / "produced" / f"{image['related_id']}.png").read_bytes() == PIXEL
    pdf_bytes = (tmp_path / "produced" / f"{pdf['related_id']}.pdf").read_bytes()
    assert pdf_bytes == b"%PDF-1.4 chunked body of a file"
    # no JSON message: Dify's placeholder
    echo = run_events(plugin_flow("echo", {"text": "x"}, outputs={"j": ["n", "json"]}),
                      daemon_settings(daemon))  # fmt: skip
    assert final(echo).outputs["j"] == [{"data": []}]


def test_the_time_bound_ends_a_slow_tool_and_the_strategy_takes_over(
    daemon: FakePluginDaemon,
) -> None:
    document = plugin_flow("slow", {"count": 50, "gap": 0.2}, error_strategy="fail-branch")
    started = time.monotonic()
    events = run_events(document, daemon_settings(daemon, timeout_s=1))
    end = node_end(events)
    assert isinstance(end, ev.NodeException) and end.error_type == "ToolTimeoutError"
    assert "longer than 1 s" in end.error_message
    assert time.monotonic() - started < 8  # bounded by the 1 s limit, not by 50 x 0.2 s


def test_a_daemon_that_never_answers_is_bounded_too(daemon: FakePluginDaemon) -> None:
    events = run_events(plugin_flow("hang"), daemon_settings(daemon, timeout_s=1))
    assert node_end(events).error_type == "ToolTimeoutError"


def test_abort_unblocks_a_waiting_tool_call(daemon: FakePluginDaemon) -> None:
    run = load_workflow(plugin_flow("hang")).run({}, settings=daemon_settings(daemon, timeout_s=60))
    events = abort_once(run, lambda: daemon.requests)
    assert isinstance(final(events), ev.WorkflowStopped)
    stopped = [e for e in events if isinstance(e, ev.NodeStopped) and e.node_id == "n"]
    assert stopped and stopped[0].error_type == "ToolCancelledError"


@pytest.mark.parametrize(
    ("tool", "params", "message"),
    [
        (
            "refuse",
            {},
            "the plugin tool refuse of langgenius/tavily/tavily failed: the tool said no",
        ),
        ("status", {"code": 401}, "failed: no"),
        ("garbage", {}, "'this is not json'"),
        ("cut_blob", {}, "the stream ended inside blob c"),
    ],
)
def test_daemon_failures_are_typed_tool_errors(
    daemon: FakePluginDaemon, tool: str, params: dict[str, Any], message: str
) -> None:
    events = run_events(plugin_flow(tool, params), daemon_settings(daemon))
    assert isinstance(final(events), ev.WorkflowFailed)
    assert message in final(events).error_message


def test_a_tool_file_over_the_cap_is_an_error(daemon: FakePluginDaemon, tmp_path: Path) -> None:
    events = run_events(plugin_flow("everything"), daemon_settings(daemon, max_file_bytes=20))
    assert "larger than the limit of 20 bytes (tools.max_file_bytes)" in final(events).error_message


def test_missing_daemon_settings_and_keys_are_named(
    daemon: FakePluginDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = run_events(plugin_flow("echo", {"text": "x"}), settings())
    assert "needs a plugin daemon (tools.plugin_daemon" in final(events).error_message
    monkeypatch.delenv("FG_TAVILY_KEY")
    events = run_events(plugin_flow("echo", {"text": "x"}), daemon_settings(daemon))
    assert "FG_TAVILY_KEY" in final(events).error_message


def test_credentials_echoed_in_a_daemon_error_are_redacted(daemon: FakePluginDaemon) -> None:
    client = PluginToolClient(daemon.base_url, "tenant-1", "daemon-key-8841")
    with pytest.raises(Exception) as caught:
        list(client.invoke(PLUGIN, "refuse", {}, timeout_s=5, secrets=("the tool said",)))
    assert "the tool said" not in str(caught.value) and "***" in str(caught.value)


def test_the_reply_is_bounded_in_bytes(daemon: FakePluginDaemon) -> None:
    client = PluginToolClient(daemon.base_url, "tenant-1", max_reply_bytes=200_000)
    with pytest.raises(ToolReplyTooLargeError, match="200000 bytes"):
        list(client.invoke(PLUGIN, "flood", {}, timeout_s=30))


# --- an older export's built-in tools, run as Dify 1.x's plugins ------------------------------


def test_an_old_builtin_runs_as_its_langgenius_plugin(
    daemon: FakePluginDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FG_DDG_KEY", "ddg-secret-1")
    document = tool_flow(
        "search", provider_id="duckduckgo", tool_parameters={"query": constant("rivers")}
    )
    for name in ("duckduckgo", "langgenius/duckduckgo/duckduckgo"):  # either name
        providers = {name: {"credentials_env": {"key": "FG_DDG_KEY"}}}
        events = run_events(document, daemon_settings(daemon, providers=providers))
        assert final(events).outputs == {"text": "1 result for rivers"}
        request = daemon.requests[-1]
        assert request["headers"]["X-Plugin-ID"] == "langgenius/duckduckgo"
        assert request["body"]["data"]["provider"] == "duckduckgo"
        assert request["body"]["data"]["credentials"] == {"key": "ddg-secret-1"}
    # Dify's rule names a few plugins <name>_tool
    jina = tool_flow("echo", provider_id="jina", tool_parameters={"text": constant("hi")})
    assert final(run_events(jina, daemon_settings(daemon))).outputs == {"text": "hi"}
    assert daemon.requests[-1]["headers"]["X-Plugin-ID"] == "langgenius/jina_tool"


def test_an_old_builtin_without_a_daemon_is_refused_by_its_plugin_id() -> None:
    document = tool_flow("search", provider_id="duckduckgo")
    with pytest.raises(DslError) as caught:
        load_workflow(document, settings=settings())
    [problem] = caught.value.problems
    text = problem.render()
    assert "langgenius/duckduckgo/duckduckgo" in text and "tools.plugin_daemon" in text
    assert problem.node is not None and problem.node.id == "n"
    # loaded without settings, the run names the plugin and the setting
    message = final(run_events(document, settings())).error_message
    assert "langgenius/duckduckgo/duckduckgo" in message and "tools.plugin_daemon" in message


# --- MCP ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    with mcp_server.running() as url:
        yield url


def mcp_settings(url: str, **server: Any) -> Any:
    return settings(tools={"mcp_servers": {"kb-server": {"url": url, **server}}, "timeout_s": 10})


def mcp_flow(tool: str, params: dict[str, Any] | None = None, **data: Any) -> dict[str, Any]:
    return tool_flow(
        tool,
        provider_id="kb-server",
        provider_type="mcp",
        tool_parameters={k: constant(v) for k, v in (params or {}).items()},
        **data,
    )


def test_mcp_tool_with_cast_arguments_and_structured_output(mcp_url: str) -> None:
    document = mcp_flow(
        "add", {"a": "2", "b": 40}, outputs={"t": ["n", "text"], "r": ["n", "result"]}
    )
    assert final(run_events(document, mcp_settings(mcp_url))).outputs == {"t": "42", "r": 42}


def test_mcp_content_kinds(mcp_url: str, tmp_path: Path) -> None:
    routes = settings(
        tools={"mcp_servers": {"kb-server": {"url": mcp_url}}},
        files={"dir": str(tmp_path)},
    )
    out = final(run_events(mcp_flow("picture", outputs={"f": ["n", "files"]}), routes)).outputs
    [image] = out["f"]
    assert image["mime_type"] == "image/png" and image["type"] == "image"
    assert (tmp_path / f"{image['related_id']}.png").read_bytes() == mcp_server.PIXEL
    record = mcp_flow("record", {"name": "abc"}, outputs={"j": ["n", "json"], "t": ["n", "text"]})
    assert final(run_events(record, routes)).outputs == {"j": [{"name": "abc", "length": 3}],
                                                         "t": ""}  # fmt: skip
    records = mcp_flow("records", outputs={"j": ["n", "json"]})
    assert final(run_events(records, routes)).outputs["j"] == [{"n": 1}, {"n": 2}]


def test_mcp_arguments_are_checked_against_the_schema_before_the_call(mcp_url: str) -> None:
    for params, fragment in [
        ({"a": "two", "b": 1}, "parameter a must be a number"),
        ({"a": 1}, "'b' is a required property"),
        ({"a": 1.5, "b": 1}, "1.5 is not of type 'integer'"),
    ]:
        events = run_events(mcp_flow("add", params), mcp_settings(mcp_url))
        assert fragment in final(events).error_message, params


def test_mcp_error_results_and_unknown_tools_fail_the_node(mcp_url: str) -> None:
    events = run_events(mcp_flow("refuse", {"reason": "no"}), mcp_settings(mcp_url))
    assert "the tool refuse reported an error" in final(events).error_message
    events = run_events(mcp_flow("teleport"), mcp_settings(mcp_url))
    assert "MCP server kb-server has no tool named teleport" in final(events).error_message


def test_mcp_headers_come_from_the_environment(
    mcp_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    routes = mcp_settings(mcp_url, headers_env={"Authorization": "FG_MCP_AUTH"})
    events = run_events(mcp_flow("whoami"), routes)
    assert "FG_MCP_AUTH" in final(events).error_message  # unset: named, not sent empty
    monkeypatch.setenv("FG_MCP_AUTH", "Bearer mcp-token-77")
    assert final(run_events(mcp_flow("whoami"), routes)).outputs["text"] == "Bearer mcp-token-77"


def test_mcp_calls_are_time_bounded_and_abortable(mcp_url: str) -> None:
    routes = settings(tools={"mcp_servers": {"kb-server": {"url": mcp_url}}, "timeout_s": 1})
    started = time.monotonic()
    events = run_events(mcp_flow("pause", {"seconds": 30}, error_strategy="fail-branch"), routes)
    assert node_end(events).error_type == "ToolTimeoutError"
    assert time.monotonic() - started < 10
    run = load_workflow(mcp_flow("pause", {"seconds": 30})).run({}, settings=mcp_settings(mcp_url))
    began = time.monotonic()
    events = abort_once(run, lambda: time.monotonic() - began > 1.0)
    assert isinstance(final(events), ev.WorkflowStopped)
    stopped = [e for e in events if isinstance(e, ev.NodeStopped)]
    assert stopped and stopped[0].error_type == "ToolCancelledError"


def test_mcp_calls_on_parallel_branches_run_side_by_side(mcp_url: str) -> None:
    # Two event loops at once: under gevent each runs on its own real thread
    # (a second loop cannot start on the greenlets' one thread).
    document = chain_flow([], {"a": ["left", "text"], "b": ["right", "text"]})
    graph = document["workflow"]["graph"]
    start, end = graph["nodes"]
    for side in ("left", "right"):
        graph["nodes"].insert(
            1,
            {
                "id": side,
                "data": {
                    "type": "tool",
                    "title": side,
                    "provider_id": "kb-server",
                    "provider_type": "mcp",
                    "tool_name": "pause",
                    "tool_parameters": {"seconds": constant(0.5)},
                },
            },
        )
    graph["edges"] = [
        {"source": "start", "target": side, "sourceHandle": "source"} for side in ("left", "right")
    ] + [{"source": side, "target": "end", "sourceHandle": "source"} for side in ("left", "right")]
    assert final(run_events(document, mcp_settings(mcp_url))).outputs == {"a": "done", "b": "done"}


def test_unknown_and_unreachable_mcp_servers_are_named() -> None:
    events = run_events(mcp_flow("add", {"a": 1, "b": 2}), settings())
    assert "MCP server kb-server is not configured" in final(events).error_message
    events = run_events(mcp_flow("add"), mcp_settings("http://127.0.0.1:1/mcp"))
    assert "the MCP server kb-server (http://127.0.0.1:1/mcp) failed" in final(events).error_message


# --- the blob cap, unit level ---------------------------------------------------------------------


def chunk(data: bytes, total: int, end: bool, sequence: int = 0) -> ToolMessage:
    return ToolMessage(
        MessageType.BLOB_CHUNK, blob=data, chunk=BlobChunk("b", sequence, total, end)
    )


def test_merge_refuses_oversized_blobs_without_buffering_them() -> None:
    with pytest.raises(ToolError, match="limit of 4 bytes"):
        list(merge_blob_chunks([text("a"), blob_message(b"12345", "x/y")], 4))
    # a chunked blob is refused on its declared size, before any chunk is kept
    with pytest.raises(ToolError, match="limit of 4 bytes"):
        list(merge_blob_chunks([chunk(b"12", 5, False)], 4))
    # and a chunk that runs past what was declared is refused too
    with pytest.raises(ToolError, match="longer than its declared length"):
        list(merge_blob_chunks([chunk(b"123", 4, False), chunk(b"45", 4, True, 1)], 100))
    whole = list(merge_blob_chunks([chunk(b"12", 4, False), chunk(b"34", 4, True, 1)], 4))
    assert [m.blob for m in whole] == [b"1234"]


def test_an_mcp_blob_over_the_cap_is_refused_before_it_is_decoded() -> None:
    server = McpServer("s", "http://127.0.0.1:9/mcp", max_file_bytes=6)
    assert server._blob(base64.b64encode(b"123456").decode(), "x/y").blob == b"123456"
    with pytest.raises(ToolError, match="limit of 6 bytes"):
        server._blob(base64.b64encode(b"1234567890").decode(), "x/y")


def test_a_json_message_can_say_it_repeats_the_text() -> None:
    from firstgate.connectors.tool_messages import parse_wire_message

    said = {"type": "json", "message": {"json_object": {"a": 1}, "suppress_output": True}}
    assert parse_wire_message(said).suppress_output is True
    plain = {"type": "json", "message": {"json_object": {"a": 1}}}
    assert parse_wire_message(plain).suppress_output is False
