"""Liveness probes against a real-socket status server, in threads and under gevent.

Timing assertions are generous bounds: a slow endpoint gives up after the
probe timeout and well before twice it.
"""

from __future__ import annotations

import time

import pytest
from firstgate.plugin_daemon_client.probes import make_probe

from tests.fakes import probe_server as ps

TIMEOUT = 0.5
KEY = "sk-route-key-1234"


def probe(kind: str, srv: ps.ProbeServer, **kw: object):  # type: ignore[no-untyped-def]
    made = make_probe(kind, srv.base_url, timeout=TIMEOUT, **kw)  # type: ignore[arg-type]
    assert made is not None
    return made


@pytest.mark.parametrize(
    ("kind", "server"),
    [
        ("llama.cpp-slots", {"slots": ps.busy_then_idle(1)}),
        ("llama.cpp-metrics", {"metrics": ps.busy_then_idle(1)}),
        ("vllm", {"metrics": ps.busy_then_idle(1), "metrics_flavor": "vllm"}),
        ("sglang", {"metrics": ps.busy_then_idle(1), "metrics_flavor": "sglang"}),
        ("tgi", {"metrics": ps.busy_then_idle(1), "metrics_flavor": "tgi"}),
        ("gate", {"gate": ps.busy_then_idle(1)}),
        ("auto", {"slots": ps.busy_then_idle(1)}),
        ("auto", {"metrics": ps.busy_then_idle(1), "metrics_flavor": "sglang"}),
        ("auto", {"metrics": ps.busy_then_idle(1), "metrics_flavor": "tgi"}),
    ],
)
def test_busy_then_idle(kind: str, server: dict) -> None:
    with ps.ProbeServer(**server) as srv:
        p = probe(kind, srv)
        assert [p(), p(), p()] == ["busy", "idle", "idle"]
        assert all(r.path in ps._STATUS_PATHS for r in srv.requests)
        if kind != "auto":
            assert len(srv.probe_requests()) == 3  # one request per call


def test_gate_generation_for_another_model_is_busy() -> None:
    with ps.ProbeServer(gate=ps.always_busy(other_model=True)) as srv:
        assert probe("gate", srv, model="our-model")() == "busy"


ALL_KINDS = [
    "llama.cpp-slots",
    "llama.cpp-metrics",
    "vllm",
    "sglang",
    "tgi",
    "gate",
    "llama-swap",
    "ollama",
    "auto",
]
FLAVOR = {"vllm": "vllm", "sglang": "sglang", "tgi": "tgi"}


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize(
    "behaviour",
    [ps.erroring(), ps.malformed(), ps.missing(), ps.slow(3.0)],
    ids=["500", "malformed", "404", "slow"],
)
def test_failures_are_no_signal_never_idle(kind: str, behaviour: ps.Behaviour) -> None:
    flavor = FLAVOR.get(kind, "llama.cpp")
    with ps.ProbeServer(
        slots=behaviour,
        metrics=behaviour,
        gate=behaviour,
        running=behaviour,
        ps=behaviour,
        metrics_flavor=flavor,  # type: ignore[arg-type]
    ) as srv:
        start = time.monotonic()
        assert probe(kind, srv)() is None
        took = time.monotonic() - start
    # Even `auto`, trying every kind, shares one probe timeout per call.
    assert took < 2 * TIMEOUT


def test_llama_metrics_are_not_read_as_vllm_and_back() -> None:
    with ps.ProbeServer(metrics=ps.always_idle(), metrics_flavor="vllm") as srv:
        assert probe("llama.cpp-metrics", srv)() is None
        assert probe("vllm", srv)() == "idle"
    with ps.ProbeServer(metrics=ps.always_idle()) as srv:
        assert probe("vllm", srv)() is None
        assert probe("llama.cpp-metrics", srv)() == "idle"


def test_metrics_of_one_server_are_never_read_as_another_s() -> None:
    for flavor in ("llama.cpp", "vllm", "sglang", "tgi", "llama-swap"):
        with ps.ProbeServer(metrics=ps.always_idle(), metrics_flavor=flavor) as srv:  # type: ignore[arg-type]
            answers = {k: probe(k, srv)() for k in ("llama.cpp-metrics", "vllm", "sglang", "tgi")}
        own = {"llama.cpp": "llama.cpp-metrics"}.get(flavor, flavor)
        assert answers == {k: ("idle" if k == own else None) for k in answers}, flavor


# --- llama-swap ------------------------------------------------------------------


@pytest.mark.parametrize("state", ["starting", "ready", "stopping"])
def test_llama_swap_starting_ready_or_stopping_is_busy(state: str) -> None:
    with ps.ProbeServer(running=ps.llama_swap(state), metrics_flavor="llama-swap") as srv:
        assert probe("llama-swap", srv, api_key=KEY)() == "busy"
        (request,) = srv.requests
        assert request.path == "/running"
        assert request.headers.get("authorization") == f"Bearer {KEY}"


def test_llama_swap_with_nothing_running_is_no_signal_never_idle() -> None:
    with ps.ProbeServer(running=ps.always_idle()) as srv:
        assert probe("llama-swap", srv)() is None


def test_auto_recognises_llama_swap_past_its_own_metrics() -> None:
    # llama-swap answers /metrics with its own host metrics and 404s /slots.
    with ps.ProbeServer(
        running=ps.busy_then_idle(1), metrics=ps.always_busy(), metrics_flavor="llama-swap"
    ) as srv:
        p = probe("auto", srv)
        assert p() == "busy" and p.chosen == "llama-swap"  # type: ignore[union-attr]
        assert p() is None  # nothing listed: no signal, and auto keeps its choice
        assert srv.count("/running") == 2 and srv.count("/metrics") == 1


# --- Ollama ----------------------------------------------------------------------


def test_ollama_model_not_idle_since_its_load_is_busy() -> None:
    with ps.ProbeServer(ps=ps.always_busy()) as srv:
        started = time.monotonic()
        assert probe("ollama", srv)() == "busy"
        took = time.monotonic() - started
        assert srv.count("/api/ps") == 2  # two looks, 0.2 s apart
    assert 0.2 <= took < TIMEOUT


@pytest.mark.parametrize(
    "behaviour", [ps.always_idle(), ps.empty_ps()], ids=["resident-idle", "empty"]
)
def test_ollama_cannot_tell_otherwise_and_never_says_idle(behaviour: ps.Behaviour) -> None:
    with ps.ProbeServer(ps=behaviour) as srv:
        made = make_probe("ollama", srv.base_url, timeout=3.0)  # room for a second look
        assert made is not None and made() is None
        # An empty list needs no second look.
        assert srv.count("/api/ps") == (1 if behaviour.name == "empty_ps" else 2)


def test_ollama_second_look_only_when_the_round_has_room() -> None:
    with ps.ProbeServer(ps=ps.always_busy()) as srv:
        made = make_probe("ollama", srv.base_url, timeout=0.3)
        assert made is not None and made() is None  # 0.3 s leaves no room for 0.2 s + a request
        assert srv.count("/api/ps") == 1


def test_auto_recognises_ollama() -> None:
    with ps.ProbeServer(ps=ps.always_busy()) as srv:
        p = probe("auto", srv)
        assert p() == "busy" and p.chosen == "ollama"  # type: ignore[union-attr]


def test_probes_strip_the_v1_path_and_go_to_the_route_origin() -> None:
    with ps.ProbeServer(slots=ps.always_busy()) as srv:
        made = make_probe("llama.cpp-slots", srv.root_url + "/v1/", timeout=TIMEOUT)
        assert made is not None and made() == "busy"
        assert [r.path for r in srv.requests] == ["/slots"]


def test_auto_sticks_to_the_first_kind_that_gives_a_signal() -> None:
    with ps.ProbeServer(metrics=ps.busy_then_idle(2), gate=ps.always_busy()) as srv:
        p = probe("auto", srv)
        assert p() == "busy"
        assert p.chosen == "llama.cpp-metrics"  # type: ignore[union-attr]
        assert [p(), p()] == ["busy", "idle"]
        assert srv.count("/slots") == 1  # tried once, then never again
        assert srv.count("/_gate/status") == 0
        assert srv.count("/metrics") == 3


def test_auto_fetches_metrics_once_per_round_for_vllm() -> None:
    with ps.ProbeServer(metrics=ps.always_busy(), metrics_flavor="vllm") as srv:
        p = probe("auto", srv)
        assert p() == "busy" and p.chosen == "vllm"  # type: ignore[union-attr]
        assert srv.count("/metrics") == 1


def test_auto_with_nothing_answering_is_no_signal() -> None:
    with ps.ProbeServer() as srv:
        assert probe("auto", srv)() is None
        assert all(srv.count(path) == 1 for path in ps._STATUS_PATHS)


# --- credentials ----------------------------------------------------------------


def test_the_route_key_goes_to_the_route_origin() -> None:
    with ps.ProbeServer(slots=ps.always_busy()) as srv:
        assert probe("llama.cpp-slots", srv, api_key=KEY)() == "busy"
        assert srv.requests[0].headers.get("authorization") == f"Bearer {KEY}"


def test_a_redirect_never_takes_the_key_to_another_host() -> None:
    with ps.ProbeServer(slots=ps.always_busy()) as other:
        with ps.ProbeServer(slots=ps.redirect(other.root_url)) as srv:
            assert probe("llama.cpp-slots", srv, api_key=KEY)() is None
            assert srv.count("/slots") == 1
        assert other.requests == []  # not followed at all


def test_an_environment_proxy_is_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    with ps.ProbeServer(slots=ps.always_busy()) as proxy:
        with ps.ProbeServer(slots=ps.always_busy()) as srv:
            for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
                monkeypatch.setenv(name, proxy.root_url)
            for name in ("NO_PROXY", "no_proxy"):
                monkeypatch.delenv(name, raising=False)
            assert probe("llama.cpp-slots", srv, api_key=KEY)() == "busy"
            assert srv.count("/slots") == 1
        assert proxy.requests == []


def test_probe_does_not_run_through_the_gate() -> None:
    """A probe made inside an open gate with a tiny first-token budget is unaffected."""
    from firstgate.plugin_daemon_client import first_token_gate

    with ps.ProbeServer(slots=ps.slow(0.2)) as srv:
        with first_token_gate(first_token_timeout=0.05):
            assert probe("llama.cpp-slots", srv)() == "busy"
