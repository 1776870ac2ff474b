"""A raw-socket fake of a model server's status endpoints, optionally with a chat endpoint.

`ProbeServer(slots=..., metrics=..., gate=..., chat=...)` listens on 127.0.0.1
(port 0) and serves each connection in its own thread (so a slow status
answer never blocks the chat stream, and it works the same under gevent).

- `/slots`, `/metrics`, `/_gate/status`, `/running` (llama-swap) and
  `/api/ps` (Ollama) answer according to a `Behaviour`:
  `busy_then_idle(n)`, `always_busy()`, `always_idle()`, `erroring()` (500),
  `slow(seconds)` (longer than the probe timeout), `malformed()`,
  `missing()` (404, also what an endpoint left unset gets) or
  `redirect(url)` (302 elsewhere).
- `/metrics` speaks llama.cpp, vLLM, SGLang, TGI or llama-swap's own
  (`metrics_flavor`), in Prometheus text format with HELP/TYPE lines and labels.
- `/running` answers as llama-swap does (`{"running": [{model, state, cmd,
  proxy, ttl, name, description}]}`): busy lists a model in `Behaviour.state`
  (`starting` unless set), idle an empty list.
- `/api/ps` answers as Ollama does (`{"models": [{name, model, size, digest,
  details, expires_at, size_vram, context_length}]}`): busy is a model that has
  not gone idle since it was loaded (its expiry is "now + 5 min" on every
  call), idle a resident model with a fixed expiry, `empty_ps` no models.
- anything else goes to `chat`, a scenario from `tests.fakes.llm_server`,
  so a route's chat and its probes share one origin as on a real server.

Every request is recorded (`requests`, `count(path)`), probes included: the
tests count probe requests at the server.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tests.fakes.llm_server import Conn, FakeLLMServer, RecordedRequest, Scenario

State = Literal["busy", "idle", "error", "slow", "malformed", "missing", "redirect", "empty"]


@dataclass
class Behaviour:
    """What an endpoint answers to its N-th request (0-based)."""

    decide: Callable[[int], State]
    slow_s: float = 0.0
    redirect_to: str = ""
    # For the gate status: which model the active generation is for.
    other_model: bool = False
    # For llama-swap's /running: the state a busy answer lists.
    state: str = "starting"
    name: str = ""

    def __repr__(self) -> str:
        return f"Behaviour({self.name})"


def busy_then_idle(busy_answers: int) -> Behaviour:
    return Behaviour(
        lambda n: "busy" if n < busy_answers else "idle", name=f"busy_then_idle({busy_answers})"
    )


def always_busy(other_model: bool = False) -> Behaviour:
    return Behaviour(lambda n: "busy", other_model=other_model, name="always_busy")


def always_idle() -> Behaviour:
    return Behaviour(lambda n: "idle", name="always_idle")


def erroring() -> Behaviour:
    return Behaviour(lambda n: "error", name="erroring")


def llama_swap(state: str) -> Behaviour:
    """`/running` always listing one model in `state`."""
    return Behaviour(lambda n: "busy", state=state, name=f"llama_swap({state})")


def empty_ps() -> Behaviour:
    """Ollama with no model in memory."""
    return Behaviour(lambda n: "empty", name="empty_ps")


def slow(seconds: float) -> Behaviour:
    return Behaviour(lambda n: "slow", slow_s=seconds, name=f"slow({seconds})")


def malformed() -> Behaviour:
    return Behaviour(lambda n: "malformed", name="malformed")


def missing() -> Behaviour:
    return Behaviour(lambda n: "missing", name="missing")


def redirect(url: str) -> Behaviour:
    return Behaviour(lambda n: "redirect", redirect_to=url, name="redirect")


# --- bodies ------------------------------------------------------------------


def slots_body(busy: bool) -> bytes:
    return json.dumps(
        [
            {"id": 0, "is_processing": busy, "n_ctx": 4096, "params": {}},
            {"id": 1, "is_processing": False, "n_ctx": 4096, "params": {}},
        ]
    ).encode()


def llamacpp_metrics_body(busy: bool) -> bytes:
    return (
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
        "# TYPE llamacpp:prompt_tokens_total counter\n"
        "llamacpp:prompt_tokens_total 1234\n"
        "# HELP llamacpp:requests_processing Number of requests processing.\n"
        "# TYPE llamacpp:requests_processing gauge\n"
        f"llamacpp:requests_processing {1 if busy else 0}\n"
        "# TYPE llamacpp:requests_deferred gauge\n"
        "llamacpp:requests_deferred 0\n"
    ).encode()


def vllm_metrics_body(busy: bool) -> bytes:
    label = '{model_name="Qwen/Qwen2.5 7B"}'
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{label} 0.0\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{label} {1.0 if busy else 0.0}\n"
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        f"vllm:gpu_cache_usage_perc{label} 0.25\n"
    ).encode()


def gate_body(busy: bool, other_model: bool) -> bytes:
    generations = (
        [
            {
                "id": "gen-1",
                "model": "other-model" if other_model else "our-model",
                "path": "/v1/chat/completions",
                "client_host": "10.0.0.7",
                "started_at": time.time() - 12.5,
                "age_s": 12.5,
            }
        ]
        if busy
        else []
    )
    return json.dumps(
        {"active_generation_count": len(generations), "active_generations": generations}
    ).encode()


def sglang_metrics_body(busy: bool) -> bytes:
    # Two data-parallel ranks, as `--dp 2` exposes them; only rank 1 is busy.
    def labels(rank: int) -> str:
        return (
            f'{{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",'
            f'moe_ep_rank="0",pp_rank="0",tp_rank="0",dp_rank="{rank}"}}'
        )

    return (
        "# HELP sglang:num_running_reqs The number of running requests.\n"
        "# TYPE sglang:num_running_reqs gauge\n"
        f"sglang:num_running_reqs{labels(0)} 0.0\n"
        f"sglang:num_running_reqs{labels(1)} {1.0 if busy else 0.0}\n"
        "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n"
        "# TYPE sglang:num_queue_reqs gauge\n"
        f"sglang:num_queue_reqs{labels(0)} 0.0\n"
        f"sglang:num_queue_reqs{labels(1)} 0.0\n"
        "# HELP sglang:token_usage The token usage.\n"
        "# TYPE sglang:token_usage gauge\n"
        f"sglang:token_usage{labels(0)} 0.12\n"
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE sglang:prompt_tokens_total counter\n"
        f"sglang:prompt_tokens_total{labels(0)} 91324.0\n"
    ).encode()


def tgi_metrics_body(busy: bool) -> bytes:
    return (
        "# TYPE tgi_request_count counter\n"
        'tgi_request_count{method="POST"} 17\n'
        "# TYPE tgi_queue_size gauge\n"
        f"tgi_queue_size {1 if busy else 0}\n"
        "# TYPE tgi_batch_current_size gauge\n"
        "tgi_batch_current_size 0\n"
        "# TYPE tgi_batch_current_max_tokens gauge\n"
        "tgi_batch_current_max_tokens 0\n"
        "# TYPE tgi_request_input_length histogram\n"
        'tgi_request_input_length_bucket{le="1000"} 3\n'
        'tgi_request_input_length_bucket{le="+Inf"} 17\n'
        "tgi_request_input_length_sum 412551\n"
        "tgi_request_input_length_count 17\n"
    ).encode()


def llama_swap_metrics_body() -> bytes:
    return (
        b"# HELP llamaswap_memory_used_bytes Used memory.\n"
        b"# TYPE llamaswap_memory_used_bytes gauge\n"
        b"llamaswap_memory_used_bytes 8589934592\n"
        b'llamaswap_load_average{interval="1m"} 1.25\n'
    )


def llama_swap_running_body(busy: bool, state: str) -> bytes:
    running = (
        [
            {
                "model": "qwen-coder-32b",
                "state": state,
                "cmd": "llama-server --port ${PORT} -m /models/qwen2.5-coder-32b-q4_k_m.gguf",
                "proxy": "http://127.0.0.1:9001",
                "ttl": 300,
                "name": "Qwen 2.5 Coder 32B",
                "description": "",
            }
        ]
        if busy
        else []
    )
    return json.dumps({"running": running}).encode()


_IDLE_EXPIRY = "2031-03-04T14:38:31.837530112+01:00"


def _ollama_expiry_now() -> str:
    # Ollama's "now + keep-alive" (5 min), with nanoseconds, as Go writes it.
    stamp = time.time() + 300
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp))
    return f"{whole}.{int((stamp % 1) * 1e9):09d}Z"


def ollama_ps_body(state: str) -> bytes:
    if state == "empty":
        return b'{"models":[]}'
    model = {
        "name": "qwen2.5:32b",
        "model": "qwen2.5:32b",
        "size": 21556060160,
        "digest": "9f13ba1299afb0b4a4e5f2e1c1e8e3b1d7f8c9a2b3c4d5e6f708192a3b4c5d6e",
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": "qwen2",
            "families": ["qwen2"],
            "parameter_size": "32.8B",
            "quantization_level": "Q4_K_M",
        },
        "expires_at": _ollama_expiry_now() if state == "busy" else _IDLE_EXPIRY,
        "size_vram": 21556060160,
        "context_length": 4096,
    }
    return json.dumps({"models": [model]}).encode()


MALFORMED: dict[str, bytes] = {
    "/slots": b'{"slots": "not a list"}',
    "/metrics": b"<html>metrics are disabled</html>",
    "/_gate/status": b'{"active_generation_count": "many"}',
    "/running": b'{"running": [{"model": "m", "state": "warming up"}]}',
    "/api/ps": b'{"models": [{"name": "m", "expires_at": "soon"}]}',
}


# --- the server ----------------------------------------------------------------


@dataclass
class _Endpoint:
    behaviour: Behaviour
    served: int = 0


@dataclass
class ProbeServer:
    slots: Behaviour | None = None
    metrics: Behaviour | None = None
    gate: Behaviour | None = None
    running: Behaviour | None = None
    ps: Behaviour | None = None
    chat: Scenario | None = None
    metrics_flavor: Literal["llama.cpp", "vllm", "sglang", "tgi", "llama-swap"] = "llama.cpp"
    framing: str = "chunked"

    def __post_init__(self) -> None:
        self._endpoints: dict[str, _Endpoint] = {}
        for path, behaviour in (
            ("/slots", self.slots),
            ("/metrics", self.metrics),
            ("/_gate/status", self.gate),
            ("/running", self.running),
            ("/api/ps", self.ps),
        ):
            if behaviour is not None:
                self._endpoints[path] = _Endpoint(behaviour)
        self._lock = threading.Lock()
        # The socket side is the chat fake's: one thread per connection, every
        # request recorded; this class only routes the status paths.
        self._server = FakeLLMServer([self._route], framing=self.framing)

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def root_url(self) -> str:
        return self._server.root_url

    @property
    def base_url(self) -> str:
        return self._server.base_url

    @property
    def requests(self) -> list[RecordedRequest]:
        return self._server.requests

    @property
    def errors(self) -> list[BaseException]:
        return self._server.errors

    def count(self, path: str) -> int:
        return sum(1 for r in list(self.requests) if r.path.split("?")[0] == path)

    def probe_requests(self) -> list[RecordedRequest]:
        return [r for r in list(self.requests) if r.path.split("?")[0] in _STATUS_PATHS]

    def __enter__(self) -> ProbeServer:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.stop()

    def _route(self, conn: Conn) -> None:
        path = conn.request.path.split("?")[0]
        if path in _STATUS_PATHS:
            self._status(conn, path)
        elif self.chat is not None:
            self.chat(conn)
        else:
            _plain(conn, 404, "text/plain", b"not found")

    def _status(self, conn: Conn, path: str) -> None:
        with self._lock:
            endpoint = self._endpoints.get(path)
            if endpoint is None:
                state: State = "missing"
                behaviour = missing()
            else:
                behaviour = endpoint.behaviour
                state = behaviour.decide(endpoint.served)
                endpoint.served += 1
        if state == "missing":
            _plain(conn, 404, "text/plain", b"File Not Found")
        elif state == "error":
            _plain(conn, 500, "application/json", b'{"error": "internal"}')
        elif state == "redirect":
            _plain(conn, 302, "text/plain", b"", {"Location": behaviour.redirect_to + path})
        elif state == "malformed":
            _plain(conn, 200, "application/json", MALFORMED[path])
        elif state == "slow":
            conn.sleep(behaviour.slow_s)
            _plain(conn, 200, "application/json", self._body(path, "busy", behaviour))
        else:
            _plain(conn, 200, _content_type(path), self._body(path, state, behaviour))

    def _body(self, path: str, state: State, behaviour: Behaviour) -> bytes:
        busy = state == "busy"
        if path == "/slots":
            return slots_body(busy)
        if path == "/metrics":
            return _METRICS[self.metrics_flavor](busy)
        if path == "/running":
            return llama_swap_running_body(busy, behaviour.state)
        if path == "/api/ps":
            return ollama_ps_body(state)
        return gate_body(busy, behaviour.other_model)


_METRICS: dict[str, Callable[[bool], bytes]] = {
    "llama.cpp": llamacpp_metrics_body,
    "vllm": vllm_metrics_body,
    "sglang": sglang_metrics_body,
    "tgi": tgi_metrics_body,
    "llama-swap": lambda busy: llama_swap_metrics_body(),
}

_STATUS_PATHS = ("/slots", "/metrics", "/_gate/status", "/running", "/api/ps")


def _content_type(path: str) -> str:
    return "text/plain; version=0.0.4" if path == "/metrics" else "application/json"


def _plain(
    conn: Conn, status: int, content_type: str, body: bytes, extra: dict[str, str] | None = None
) -> None:
    reason = {200: "OK", 302: "Found", 404: "Not Found", 500: "Internal Server Error"}[status]
    lines = [
        f"HTTP/1.1 {status} {reason}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{k}: {v}" for k, v in (extra or {}).items()),
    ]
    conn.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    conn.close()
