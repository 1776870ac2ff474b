"""The http-request node against real loopback servers: Dify's semantics, the
address policy (every private-address trick refused by default, the allow-list
opening exactly what it names), redirects, deadlines, size caps, and secrets."""

from __future__ import annotations

import json
import socket
import time
import tracemalloc
from typing import Any

import httpx
import pytest
from firstgate.connectors.errors import AddressRefusedError, ResponseTooLargeError
from firstgate.connectors.guarded_http import (
    GuardedHttp,
    HttpLimits,
    RequestSpec,
    Timeouts,
    decoded,
)
from firstgate.connectors.net_policy import NetworkPolicy
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev

from tests.connect_support import abort_once, node_end, one_node_flow, run_events, settings
from tests.fakes.http_target import HttpTarget, packed
from tests.run_events import final

OUTPUTS = {
    "status": ["n", "status_code"],
    "body": ["n", "body"],
    "headers": ["n", "headers"],
}


def http_flow(url: str, **data: Any) -> dict[str, Any]:
    fields = {"method": "get", "url": url, "headers": "", "params": "", **data}
    return one_node_flow("http-request", fields, OUTPUTS)


def with_error_outputs(document: dict[str, Any]) -> dict[str, Any]:
    end = document["workflow"]["graph"]["nodes"][2]["data"]
    end["outputs"] += [
        {"variable": "error_type", "value_selector": ["n", "error_type"]},
        {"variable": "error_message", "value_selector": ["n", "error_message"]},
    ]
    return document


def allow(*entries: str) -> Any:
    return settings(http_request={"allow": list(entries)})


@pytest.fixture
def target():
    with HttpTarget() as server:
        yield server


# --- Dify's semantics -------------------------------------------------------------


def test_get_with_params_headers_and_raw_json_body(target: HttpTarget) -> None:
    document = http_flow(
        target.url + "/echo",
        headers="X-Trace: {{#start.trace#}}\nAccept:application/json\n\n",
        params="q: {{#start.trace#}}\nq: two\nempty",
    )
    document["workflow"]["graph"]["nodes"][0]["data"]["variables"] = [
        {"variable": "trace", "type": "text-input", "label": "t", "required": True}
    ]
    events = run_events(document, allow(f"127.0.0.1:{target.port}"), trace="abc")
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs["status"] == 200
    assert isinstance(done.outputs["body"], str)  # raw text, as Dify keeps it
    echoed = json.loads(done.outputs["body"])
    assert echoed["headers"]["x-trace"] == "abc"
    assert echoed["headers"]["accept"] == "application/json"
    assert echoed["query"] == {"q": ["abc", "two"], "empty": [""]}
    assert done.outputs["headers"]["content-type"] == "application/json"


def test_a_newline_in_an_input_adds_no_parameter_and_no_header(target: HttpTarget) -> None:
    """Lines are split before inputs are substituted (Dify's order for params), and
    line breaks in a substituted header are dropped: an input cannot add a query
    parameter, add a header or override one."""
    document = http_flow(
        target.url + "/echo",
        headers="X-Trace: {{#start.trace#}}\nAuthorization: Bearer mine",
        params="q: {{#start.trace#}}",
    )
    document["workflow"]["graph"]["nodes"][0]["data"]["variables"] = [
        {"variable": "trace", "type": "paragraph", "label": "t", "required": True}
    ]
    hostile = "abc\nadmin: true\r\nAuthorization: Bearer theirs\nX-Injected: 1"
    events = run_events(document, allow(f"127.0.0.1:{target.port}"), trace=hostile)
    echoed = json.loads(final(events).outputs["body"])
    assert echoed["query"] == {"q": [hostile]}  # one parameter, its value whole
    assert "admin" not in echoed["query"]
    assert echoed["headers"]["authorization"] == "Bearer mine"
    assert "x-injected" not in echoed["headers"]
    assert echoed["headers"]["x-trace"] == "abcadmin: trueAuthorization: Bearer theirsX-Injected: 1"


def test_json_body_is_repaired_and_sent_with_its_content_type(target: HttpTarget) -> None:
    body = {"type": "json", "data": [{"type": "text", "value": '{"a": 1, "b": [1, 2,],}'}]}
    events = run_events(
        http_flow(target.url + "/echo", method="POST", body=body),
        allow(f"127.0.0.1:{target.port}"),
    )
    echoed = json.loads(final(events).outputs["body"])
    assert echoed["method"] == "POST"
    assert json.loads(echoed["body"]) == {"a": 1, "b": [1, 2]}
    assert echoed["headers"]["content-type"] == "application/json"


def test_form_bodies(target: HttpTarget) -> None:
    urlencoded = {
        "type": "x-www-form-urlencoded",
        "data": [{"key": "a", "type": "text", "value": "1 2"}, {"key": "b", "value": "x"}],
    }
    events = run_events(
        http_flow(target.url + "/echo", method="post", body=urlencoded),
        allow(f"127.0.0.1:{target.port}"),
    )
    echoed = json.loads(final(events).outputs["body"])
    assert echoed["body"] == "a=1+2&b=x"
    multipart = {"type": "form-data", "data": [{"key": "field", "type": "text", "value": "v"}]}
    events = run_events(
        http_flow(target.url + "/echo", method="post", body=multipart),
        allow(f"127.0.0.1:{target.port}"),
    )
    echoed = json.loads(final(events).outputs["body"])
    assert echoed["headers"]["content-type"].startswith("multipart/form-data; boundary=")
    assert 'name="field"' in echoed["body"]


def test_non_2xx_is_a_success_without_retry_or_strategy(target: HttpTarget) -> None:
    events = run_events(http_flow(target.url + "/status/503"), allow(f"127.0.0.1:{target.port}"))
    done = final(events)
    assert isinstance(done, ev.WorkflowSucceeded)
    assert done.outputs["status"] == 503
    assert done.outputs["body"] == "status 503"


def test_non_2xx_with_a_strategy_is_an_http_response_code_error(target: HttpTarget) -> None:
    document = with_error_outputs(
        http_flow(
            target.url + "/status/500",
            error_strategy="default-value",
            default_value=[{"key": "body", "type": "string", "value": "fallback"}],
        )
    )
    events = run_events(document, allow(f"127.0.0.1:{target.port}"))
    exc = node_end(events)
    assert isinstance(exc, ev.NodeException)
    assert exc.error_type == "HTTPResponseCodeError"
    assert final(events).outputs["body"] == "fallback"
    assert final(events).outputs["error_message"] == "Request failed with status code 500"


def test_retry_on_status_then_the_run_fails(target: HttpTarget) -> None:
    document = http_flow(
        target.url + "/status/502",
        retry_config={"retry_enabled": True, "max_retries": 2, "retry_interval": 10},
    )
    events = run_events(document, allow(f"127.0.0.1:{target.port}"))
    assert [e.attempt for e in events if isinstance(e, ev.NodeRetry)] == [1, 2]
    assert isinstance(final(events), ev.WorkflowFailed)
    assert len(target.requests) == 3


# --- the address policy ------------------------------------------------------------


def _refusal(url: str, routes: Any = None) -> ev.Event:
    events = run_events(with_error_outputs(http_flow(url, error_strategy="fail-branch")), routes)
    return node_end(events)


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "2130706433",  # decimal
        "0x7f000001",  # hex
        "0x7f.0.0.1",
        "0177.0.0.1",  # octal
        "127.1",  # short form
        "localhost",  # a name that resolves to loopback
        "[::ffff:127.0.0.1]",  # IPv6-mapped
        "[::1]",
        "0.0.0.0",
    ],
)
def test_every_spelling_of_loopback_is_refused_by_default(target: HttpTarget, host: str) -> None:
    end = _refusal(f"http://{host}:{target.port}/json")
    assert isinstance(end, ev.NodeException)
    if host.startswith("0177"):
        # httpx refuses a leading-zero IPv4 as an invalid URL before any lookup
        assert end.error_type == "InvalidURLError"
    else:
        assert end.error_type == "AddressRefusedError"
        assert "http_request.allow" in end.error_message
    assert target.requests == []  # nothing ever reached the server


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", "cloud-metadata"),
        ("http://[fd00:ec2::254]/", "cloud-metadata"),
        ("http://10.1.2.3/", "private"),
        ("http://192.168.0.1:8080/", "private"),
        ("http://172.16.5.4/", "private"),
        ("http://169.254.1.1/", "link-local"),
        ("http://100.64.0.1/", "reserved"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[::ffff:10.0.0.1]/", "private"),
        ("http://[64:ff9b::a00:1]/", "private"),  # NAT64 of 10.0.0.1
        ("http://[64:ff9b:1::a00:1]/", "private"),  # local-use NAT64
        ("http://[64:ff9b:1::808:808]/", "private"),  # local-use NAT64, whatever it embeds
        ("http://[::ffff:0:a00:1]/", "private"),  # SIIT IPv4-translated 10.0.0.1
        ("http://[::ffff:0:7f00:1]/", "loopback"),
        ("http://[::a00:1]/", "private"),  # IPv4-compatible 10.0.0.1
        ("http://[::7f00:1]/", "loopback"),
        ("http://[fec0::1]/", "private"),  # site-local
        ("http://224.0.0.1/", "multicast"),
    ],
)
def test_private_link_local_and_metadata_addresses_are_refused(url: str, reason: str) -> None:
    end = _refusal(url)
    assert isinstance(end, ev.NodeException)
    assert end.error_type == "AddressRefusedError"
    assert f"a {reason} address" in end.error_message


def test_the_check_is_on_the_resolved_address_and_pins_it(monkeypatch: Any) -> None:
    """DNS rebinding: the name answers a public address to a first lookup and
    loopback to the next. The connection uses the one lookup that was checked."""
    answers = iter(["93.184.216.34", "127.0.0.1"])
    seen: list[str] = []
    real = socket.getaddrinfo

    def rebinding(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.test":
            address = next(answers)
            seen.append(address)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    connected: list[str] = []
    real_connect = socket.create_connection

    def record(address: Any, *args: Any, **kwargs: Any) -> Any:
        connected.append(address[0])
        raise OSError("no route (test)")

    monkeypatch.setattr(socket, "create_connection", record)
    http = GuardedHttp(NetworkPolicy())
    with pytest.raises(Exception, match="failed"):
        http.request(RequestSpec("get", "http://rebind.test:81/"), timeouts=Timeouts(1, 1, 1))
    assert seen == ["93.184.216.34"]  # resolved once
    assert connected == ["93.184.216.34"]  # and connected to exactly that address
    monkeypatch.setattr(socket, "create_connection", real_connect)


def test_a_name_resolving_to_any_private_address_is_refused(monkeypatch: Any) -> None:
    real = socket.getaddrinfo

    def two_answers(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "mixed.test":
            return [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
            ]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", two_answers)
    with pytest.raises(AddressRefusedError, match="127.0.0.1, a loopback"):
        GuardedHttp(NetworkPolicy()).request(RequestSpec("get", "http://mixed.test/"))


def test_the_allow_list_opens_exactly_what_it_names(target: HttpTarget) -> None:
    with HttpTarget() as other:
        exact = allow(f"127.0.0.1:{target.port}")
        assert isinstance(_refusal(f"{target.url}/json", exact), ev.NodeSucceeded)
        # another port on the same address stays closed
        assert _refusal(f"{other.url}/json", exact).error_type == "AddressRefusedError"
        # another loopback address stays closed
        assert (
            _refusal(f"http://127.0.0.2:{target.port}/json", exact).error_type
            == "AddressRefusedError"
        )
        # a host name entry opens that name (any port), not the address behind it
        by_name = allow("localhost")
        assert isinstance(
            _refusal(f"http://localhost:{other.port}/json", by_name), ev.NodeSucceeded
        )
        assert _refusal(f"{other.url}/json", by_name).error_type == "AddressRefusedError"
        # a CIDR block opens every address in it
        block = allow("127.0.0.0/8")
        assert isinstance(_refusal(f"{other.url}/json", block), ev.NodeSucceeded)
        assert isinstance(_refusal(f"{target.url}/json", block), ev.NodeSucceeded)
        # an address entry without a port opens every port of that address
        address = allow("127.0.0.1")
        assert isinstance(_refusal(f"{other.url}/json", address), ev.NodeSucceeded)


def test_a_redirect_to_a_private_address_is_refused_at_that_hop(target: HttpTarget) -> None:
    with HttpTarget() as inner:
        hop = f"{target.url}/redirect?to={inner.url}/json"
        end = _refusal(hop, allow(f"127.0.0.1:{target.port}"))
        assert end.error_type == "AddressRefusedError"
        assert str(inner.port) in end.error_message
        assert inner.requests == []
        assert [r["path"] for r in target.requests] == ["/redirect"]
        metadata = f"{target.url}/redirect?to=http://169.254.169.254/latest/"
        end = _refusal(metadata, allow(f"127.0.0.1:{target.port}"))
        assert "cloud-metadata" in end.error_message
        # allowed hops are followed, as Dify follows them (303 -> GET)
        events = run_events(
            http_flow(f"{target.url}/redirect?code=303&to={inner.url}/json", method="post"),
            allow("127.0.0.0/8"),
        )
        assert final(events).outputs["body"] == '{"ok": true, "items": [1, 2]}'
        assert inner.requests[-1]["method"] == "GET"


def test_redirects_beyond_max_redirects_fail_naming_the_limit(target: HttpTarget) -> None:
    loop = f"{target.url}/redirect?to={target.url}/redirect%3Fto%3D{target.url}/json"
    routes = settings(http_request={"allow": ["127.0.0.1"], "max_redirects": 1})
    end = _refusal(loop, routes)
    assert end.error_type == "TooManyRedirectsError"
    assert "more than 1 redirects" in end.error_message
    ok = settings(http_request={"allow": ["127.0.0.1"], "max_redirects": 2})
    assert isinstance(_refusal(loop, ok), ev.NodeSucceeded)


# --- time and size --------------------------------------------------------------


def test_a_slow_server_hits_the_read_timeout(target: HttpTarget) -> None:
    document = with_error_outputs(
        http_flow(target.url + "/slow?delay=30", timeout={"read": 1}, error_strategy="fail-branch")
    )
    started = time.monotonic()
    end = node_end(run_events(document, allow("127.0.0.1")))
    assert end.error_type == "HttpTimeoutError"
    assert "no read progress within 1 s" in end.error_message
    assert time.monotonic() - started < 20  # not the 30 s the server wanted


def test_a_trickling_server_hits_the_total_deadline(target: HttpTarget) -> None:
    document = with_error_outputs(
        http_flow(
            target.url + "/trickle?every=0.2",
            timeout={"connect": 1, "read": 1, "write": 1},
            error_strategy="fail-branch",
        )
    )
    end = node_end(run_events(document, allow("127.0.0.1")))
    assert end.error_type == "HttpTimeoutError"
    assert "total time limit of 3 s" in end.error_message


def test_a_gigabyte_with_its_length_declared_fails_before_reading(target: HttpTarget) -> None:
    end = _refusal(f"{target.url}/huge?mb=1024", allow("127.0.0.1"))
    assert end.error_type == "ResponseTooLargeError"
    assert "limit of 1048576 bytes (http_request.max_text_bytes)" in end.error_message
    assert target.huge_sent < 64 * 1024 * 1024


def test_a_gigabyte_without_a_length_is_cut_at_the_cap(target: HttpTarget) -> None:
    routes = settings(http_request={"allow": ["127.0.0.1"], "max_binary_bytes": 2_000_000})
    end = _refusal(f"{target.url}/huge?mb=1024&declare=0&type=application/zip", routes)
    assert end.error_type == "ResponseTooLargeError"
    assert "binary response body is larger than the limit of 2000000 bytes" in end.error_message
    assert target.huge_sent < 64 * 1024 * 1024


def test_a_body_of_exactly_the_cap_is_kept_whole(target: HttpTarget) -> None:
    routes = settings(http_request={"allow": ["127.0.0.1"], "max_text_bytes": 1024 * 1024})
    events = run_events(http_flow(f"{target.url}/huge?mb=1"), routes)
    assert len(final(events).outputs["body"]) == 1024 * 1024


def test_a_server_that_promises_more_than_it_sends_is_an_error(target: HttpTarget) -> None:
    end = _refusal(f"{target.url}/liar-long", allow("127.0.0.1"))
    assert end.error_type == "HttpTransportError"
    assert "liar-long" in end.error_message


def test_a_server_that_sends_more_than_it_promised_gives_what_it_declared(
    target: HttpTarget,
) -> None:
    routes = allow("127.0.0.1")
    events = run_events(http_flow(f"{target.url}/liar-short"), routes)
    assert final(events).outputs["body"] == "AAAAA"
    # the poisoned connection is not reused for the next request
    events = run_events(http_flow(f"{target.url}/json"), routes)
    assert final(events).outputs["body"] == '{"ok": true, "items": [1, 2]}'


def test_abort_unblocks_a_waiting_request(target: HttpTarget) -> None:
    run = load_workflow(http_flow(target.url + "/slow?delay=30")).run(
        {}, settings=allow("127.0.0.1")
    )
    events = abort_once(run, lambda: target.requests, "user pressed stop")
    assert isinstance(final(events), ev.WorkflowStopped)
    # The socket was shut down: the node itself reported back (a request left
    # blocked would only be abandoned when the run's drain grace ran out).
    stopped = [e for e in events if isinstance(e, ev.NodeStopped) and e.node_id == "n"]
    assert stopped and stopped[0].error_type == "RequestCancelledError"


# --- secrets ----------------------------------------------------------------------


def test_credentials_never_appear_in_events(target: HttpTarget) -> None:
    secret = "sk-very-secret-4242"
    document = http_flow(
        f"http://127.0.0.1:{target.port}/echo?user={{{{#start.who#}}}}",
        headers=f"X-Copy: {secret}",
        authorization={
            "type": "api-key",
            "config": {"type": "bearer", "api_key": secret, "header": ""},
        },
    )
    document["workflow"]["graph"]["nodes"][0]["data"]["variables"] = [
        {"variable": "who", "type": "text-input", "label": "w", "required": True}
    ]
    events = run_events(document, allow("127.0.0.1"), who="me")
    assert json.loads(final(events).outputs["body"])["headers"]["authorization"] == (
        f"Bearer {secret}"
    )
    shown = "\n".join(
        json.dumps(e.to_dict(), default=str)
        for e in events
        # The outputs themselves (and the end node streaming them) hold what the
        # echo server sent back, secret included: that is the run's result.
        if not isinstance(e, ev.WorkflowSucceeded | ev.NodeSucceeded | ev.TextChunk)
    )
    succeeded = next(e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "n")
    shown += json.dumps(succeeded.process_data)
    assert secret not in shown
    assert "Authorization: ******" in succeeded.process_data["request"]
    # user:password@ in the URL: sent (httpx turns it into Basic auth), never shown
    events = run_events(
        http_flow(f"http://admin:hunter2pass@127.0.0.1:{target.port}/echo"), allow("127.0.0.1")
    )
    assert json.loads(final(events).outputs["body"])["headers"]["authorization"].startswith("Basic")
    succeeded = next(e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "n")
    assert "hunter2pass" not in json.dumps(succeeded.process_data)
    assert "admin" not in succeeded.process_data["request"]
    # and a failing request's error does not carry them either
    refused = run_events(
        with_error_outputs(
            http_flow(
                f"http://admin:hunter2pass@127.0.0.1:{target.port}/x?key={secret}",
                error_strategy="fail-branch",
            )
        )
    )
    text = "\n".join(json.dumps(e.to_dict(), default=str) for e in refused)
    assert "AddressRefusedError" in text
    assert secret not in text and "hunter2pass" not in text


def test_basic_and_custom_header_auth(target: HttpTarget) -> None:
    routes = allow("127.0.0.1")
    basic = {"type": "api-key", "config": {"type": "basic", "api_key": "user:pw"}}
    events = run_events(http_flow(target.url + "/echo", authorization=basic), routes)
    headers = json.loads(final(events).outputs["body"])["headers"]
    assert headers["authorization"] == "Basic dXNlcjpwdw=="
    custom = {"type": "api-key", "config": {"type": "custom", "api_key": "k1", "header": "X-Key"}}
    events = run_events(http_flow(target.url + "/echo", authorization=custom), routes)
    assert json.loads(final(events).outputs["body"])["headers"]["x-key"] == "k1"


def test_direct_client_limits_apply_per_settings() -> None:
    http = GuardedHttp(NetworkPolicy(["127.0.0.1"]), HttpLimits(max_text_bytes=10))
    with HttpTarget() as server:
        with pytest.raises(Exception, match="limit of 10 bytes"):
            http.request(RequestSpec("get", server.url + "/json"))
    http.close()


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate", "gzip, deflate"])
def test_compressed_bodies_are_inflated_as_httpx_inflates_them(
    target: HttpTarget, coding: str
) -> None:
    url = f"{target.url}/packed?mb=0.01&coding={coding}"
    events = run_events(http_flow(url), allow(f"127.0.0.1:{target.port}"))
    plain = ("all work and no play\n" * 3000)[: int(0.01 * 1024 * 1024)]
    assert final(events).outputs["body"] == plain
    assert target.requests[-1]["headers"]["accept-encoding"] == "gzip, deflate"


def test_inflating_gives_bounded_pieces_and_names_a_corrupt_body() -> None:
    pieces = list(decoded([packed(8.0, "gzip")], "gzip"))  # one 20 KiB chunk, 8 MiB inside
    assert sum(map(len, pieces)) == 8 * 1024 * 1024
    assert max(map(len, pieces)) <= 64 * 1024
    assert b"".join(decoded([b"plain"], "br, identity")) == b"plain"  # unknown: left as is
    with pytest.raises(httpx.DecodingError, match="gzip body is corrupt"):
        list(decoded([b"not gzip at all"], "gzip"))


def test_a_compression_bomb_is_refused_without_inflating_it(target: HttpTarget) -> None:
    """100 MiB packed into 250 KiB: refused at the 1 MiB text cap, and memory
    stays near the cap (inflating one 64 KiB network chunk whole would take 25 MiB)."""
    packed(100.0, "gzip")  # the fake builds (and keeps) it before the measurement
    http = GuardedHttp(NetworkPolicy([f"127.0.0.1:{target.port}"]))
    tracemalloc.start()
    try:
        with pytest.raises(ResponseTooLargeError):
            http.request(RequestSpec("get", f"{target.url}/packed?mb=100&coding=gzip"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        http.close()
    assert peak < 8 * 1024 * 1024, peak
