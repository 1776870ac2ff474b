"""Probe interpreters, origins and the credential rule, without sockets."""

from __future__ import annotations

import json

import pytest
from firstgate.plugin_daemon_client.probes import (
    AutoProbe,
    EndpointProbe,
    auth_headers,
    interpret_gate_status,
    interpret_llama_swap_running,
    interpret_llamacpp_metrics,
    interpret_ollama_ps,
    interpret_sglang_metrics,
    interpret_slots,
    interpret_tgi_metrics,
    interpret_vllm_metrics,
    make_probe,
    metric_values,
    origin_of,
)


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080"),
        ("http://LocalHost:8080/v1/", "http://localhost:8080"),
        ("https://gpu.example/v1", "https://gpu.example:443"),
        ("http://gpu.example", "http://gpu.example:80"),
        ("http://user:pw@gpu.example:81/x", "http://gpu.example:81"),
        ("http://[::1]:8080/v1", "http://[::1]:8080"),
    ],
)
def test_origin_drops_path_and_userinfo(url: str, origin: str) -> None:
    assert origin_of(url) == origin


def test_key_only_to_the_same_origin() -> None:
    base = "http://127.0.0.1:8080/v1"
    assert auth_headers("http://127.0.0.1:8080/slots", base, "k3y!") == {
        "Authorization": "Bearer k3y!"
    }
    assert auth_headers("http://127.0.0.1:8081/slots", base, "k3y!") == {}
    assert auth_headers("https://127.0.0.1:8080/slots", base, "k3y!") == {}
    assert auth_headers("http://evil.example:8080/slots", base, "k3y!") == {}
    assert auth_headers("http://127.0.0.1:8080/slots", base, None) == {}


@pytest.mark.parametrize(
    ("body", "answer"),
    [
        ([{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}], "busy"),
        ([{"id": 0, "is_processing": False}], "idle"),
        ([], None),
    ],
)
def test_slots(body: object, answer: str | None) -> None:
    assert interpret_slots(json.dumps(body).encode()) == answer


@pytest.mark.parametrize(
    "body", [b'{"error": "slots disabled"}', b"[{}]", b'[{"is_processing": "maybe"}]', b"<html>"]
)
def test_slots_unexpected_bodies_raise(body: bytes) -> None:
    with pytest.raises(ValueError):
        interpret_slots(body)


def test_prometheus_parsing_with_labels_and_comments() -> None:
    text = (
        "# HELP vllm:num_requests_running running\n"
        'vllm:num_requests_running{model_name="a b}c",engine="0"} 2.0\n'
        'vllm:num_requests_running{model_name="other"} 1\n'
        "vllm:num_requests_running_total 99\n"
        "vllm:num_requests_waiting 0 1712345678\n"
    )
    assert metric_values(text, "vllm:num_requests_running") == [2.0, 1.0]
    assert metric_values(text, "vllm:num_requests_waiting") == [0.0]
    assert interpret_vllm_metrics(text.encode()) == "busy"


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("llamacpp:requests_processing 1\nllamacpp:requests_deferred 0\n", "busy"),
        ("llamacpp:requests_processing 0\nllamacpp:requests_deferred 2\n", "busy"),
        ("llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n", "idle"),
        ("llamacpp:requests_processing 0\n", "idle"),
        ("llamacpp:prompt_tokens_total 5\n", None),
        ("", None),
    ],
)
def test_llamacpp_metrics(text: str, answer: str | None) -> None:
    assert interpret_llamacpp_metrics(text.encode()) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ('vllm:num_requests_running{model_name="m"} 0.0\nvllm:num_requests_waiting 3.0\n', "busy"),
        ('vllm:num_requests_running{model_name="m"} 0.0\nvllm:num_requests_waiting 0.0\n', "idle"),
        ("vllm:num_requests_waiting 3.0\n", None),  # no running gauge: not a vLLM page
    ],
)
def test_vllm_metrics(text: str, answer: str | None) -> None:
    assert interpret_vllm_metrics(text.encode()) == answer


@pytest.mark.parametrize(
    "text",
    [
        "llamacpp:requests_processing NaN\n",
        "llamacpp:requests_processing -1\n",
        "llamacpp:requests_processing\n",
    ],
)
def test_metrics_nonsense_raises(text: str) -> None:
    with pytest.raises(ValueError):
        interpret_llamacpp_metrics(text.encode())


def gen(model: str) -> dict:
    return {
        "id": "g",
        "model": model,
        "path": "/v1/chat/completions",
        "client_host": "h",
        "started_at": 1.0,
        "age_s": 3.0,
    }


@pytest.mark.parametrize(
    ("body", "answer"),
    [
        ({"active_generation_count": 1, "active_generations": [gen("ours")]}, "busy"),
        ({"active_generation_count": 1, "active_generations": [gen("another")]}, "busy"),
        ({"active_generation_count": 0, "active_generations": [gen("x")]}, "busy"),
        ({"active_generation_count": 2, "active_generations": []}, "busy"),
        ({"active_generation_count": 0, "active_generations": []}, "idle"),
    ],
)
def test_gate_status(body: dict, answer: str) -> None:
    assert interpret_gate_status(json.dumps(body).encode()) == answer


@pytest.mark.parametrize(
    "body",
    [{"active_generation_count": -1, "active_generations": []}, {"active_generations": []}, {}],
)
def test_gate_status_unexpected_raises(body: dict) -> None:
    with pytest.raises(ValueError):
        interpret_gate_status(json.dumps(body).encode())


def test_make_probe_kinds() -> None:
    base = "http://127.0.0.1:1/v1"
    assert make_probe("off", base) is None
    assert isinstance(make_probe("auto", base), AutoProbe)
    probe = make_probe("llama.cpp-slots", base)
    assert isinstance(probe, EndpointProbe) and probe.url == "http://127.0.0.1:1/slots"
    assert make_probe("gate", base).url == "http://127.0.0.1:1/_gate/status"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kind", "base", "timeout"),
    [
        ("koboldcpp", "http://h:1", 4.0),
        ("auto", "ftp://h:1", 4.0),
        ("auto", "not a url", 4.0),
        ("auto", "http://h:1", 0),
        ("auto", "http://h:1", float("nan")),
        ("auto", "http://h:1", "4"),
    ],
)
def test_make_probe_rejects_configuration_mistakes(kind: str, base: str, timeout: object) -> None:
    with pytest.raises(ValueError):
        make_probe(kind, base, timeout=timeout)  # type: ignore[arg-type]


def test_probe_repr_never_shows_the_key() -> None:
    probe = make_probe("auto", "http://127.0.0.1:1", api_key="sk-secret-123")
    assert "sk-secret-123" not in repr(probe) and "sk-secret-123" not in repr(probe._fetcher)  # type: ignore[union-attr]


def test_unreachable_server_is_no_signal() -> None:
    # Port 9 (discard) on loopback is closed in test environments: connect refused.
    assert make_probe("auto", "http://127.0.0.1:9", timeout=0.5)() is None  # type: ignore[misc]


# --- SGLang, TGI, llama-swap, Ollama ---------------------------------------------

SG = '{model_name="Qwen/Qwen2.5-7B-Instruct",tp_rank="0",dp_rank="%d"}'


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        (f"sglang:num_running_reqs{SG % 0} 0.0\nsglang:num_running_reqs{SG % 1} 2.0\n", "busy"),
        (f"sglang:num_running_reqs{SG % 0} 0.0\nsglang:num_queue_reqs{SG % 0} 1.0\n", "busy"),
        (f"sglang:num_running_reqs{SG % 0} 0.0\nsglang:num_queue_reqs{SG % 0} 0.0\n", "idle"),
        (f"sglang:num_queue_reqs{SG % 0} 4.0\n", None),  # no running gauge: not SGLang
        ("vllm:num_requests_running 1.0\n", None),
    ],
)
def test_sglang_metrics(text: str, answer: str | None) -> None:
    assert interpret_sglang_metrics(text.encode()) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("tgi_batch_current_size 3\ntgi_queue_size 0\n", "busy"),
        ("tgi_batch_current_size 0\ntgi_queue_size 2\n", "busy"),
        ("tgi_batch_current_size 0\ntgi_queue_size 0\n", "idle"),
        ("tgi_queue_size 2\n", None),
        ("tgi_batch_current_max_tokens 0\ntgi_batch_current_size_x 4\n", None),
    ],
)
def test_tgi_metrics(text: str, answer: str | None) -> None:
    assert interpret_tgi_metrics(text.encode()) == answer


def swap(*states: str) -> bytes:
    return json.dumps(
        {"running": [{"model": f"m{i}", "state": s, "ttl": 0} for i, s in enumerate(states)]}
    ).encode()


@pytest.mark.parametrize(
    ("body", "answer"),
    [
        (swap("starting"), "busy"),
        (swap("ready"), "busy"),
        (swap("stopping"), "busy"),
        (swap("stopped", "ready"), "busy"),
        (swap(), None),  # never idle: old llama-swap lists only ready models
        (swap("stopped"), None),
    ],
)
def test_llama_swap_running(body: bytes, answer: str | None) -> None:
    assert interpret_llama_swap_running(body) == answer


@pytest.mark.parametrize(
    "body", [b'{"running": "none"}', b"[]", swap("warming"), b'{"running": [{"model": "m"}]}']
)
def test_llama_swap_unexpected_bodies_raise(body: bytes) -> None:
    with pytest.raises(ValueError):
        interpret_llama_swap_running(body)


def ps(*models: tuple[str, str]) -> bytes:
    return json.dumps(
        {"models": [{"name": n, "model": n, "size": 1, "expires_at": e} for n, e in models]}
    ).encode()


T0 = "2030-01-01T10:00:00.000000001Z"
T1 = "2030-01-01T10:00:00.200000001Z"


@pytest.mark.parametrize(
    ("first", "second", "answer"),
    [
        (ps(("a:1b", T0)), ps(("a:1b", T1)), "busy"),  # expiry moves: loading, or never idle
        (ps(("a:1b", T0)), ps(("a:1b", T0)), None),  # fixed expiry: idle or serving, unknown
        (ps(("a:1b", T0)), ps(("b:7b", T1)), None),  # another model, seen once
        (ps(), ps(), None),  # empty is never idle
        (ps(("a:1b", T1)), ps(("a:1b", T0)), None),
    ],
)
def test_ollama_ps(first: bytes, second: bytes, answer: str | None) -> None:
    assert interpret_ollama_ps(first, second) == answer


@pytest.mark.parametrize(
    "body", [b'{"models": {}}', b'{"models": [{"name": "a", "expires_at": "soon"}]}', b"{}"]
)
def test_ollama_unexpected_bodies_raise(body: bytes) -> None:
    with pytest.raises(ValueError):
        interpret_ollama_ps(body, body)


def test_auto_tries_every_kind() -> None:
    assert AutoProbe.ORDER == (
        "llama.cpp-slots",
        "llama.cpp-metrics",
        "vllm",
        "sglang",
        "tgi",
        "gate",
        "llama-swap",
        "ollama",
    )
