"""Liveness probes: ask the model server whether it is still working.

The first-token watchdog (`Gate`) calls a probe once per expired window. A
probe answers "busy" (keep waiting), "idle" (nothing is running: our request
is lost, fire now) or None ("no signal": fire exactly as if there were no
probe). Only an endpoint that positively reports an empty server may say
"idle"; every error, timeout, non-200, missing endpoint or body we do not
recognise is None, because a wrong "idle" kills a healthy long prefill and a
wrong None only costs what having no probe costs.

Safety rules, each of them tested:

- a probe goes only to the route's own origin (scheme, host and port of the
  route's `base_url`; its path, e.g. `/v1`, is dropped);
- it uses its own plain `httpx.Client` (not the gated transport, so the
  gate of the request being watched never bounds it), with
  `trust_env=False` (an environment proxy would be another host) and no
  redirects (a redirect could lead the key elsewhere);
- the route's API key is sent only when the probe URL has the route's origin;
- each call is bounded by a short total timeout (default 4 s), because the
  watchdog waits for the answer before it extends or fires.

Endpoints understood:

| kind | request | busy | idle |
|---|---|---|---|
| `llama.cpp-slots` | `GET /slots` | a slot has `is_processing: true` | a non-empty list, none processing |
| `llama.cpp-metrics` | `GET /metrics` | `llamacpp:requests_processing` (+ `requests_deferred`) > 0 | both 0 |
| `vllm` | `GET /metrics` | `vllm:num_requests_running` + `vllm:num_requests_waiting` > 0 | sum 0 |
| `sglang` | `GET /metrics` | `sglang:num_running_reqs` + `sglang:num_queue_reqs` > 0 (every rank summed) | sum 0 |
| `tgi` | `GET /metrics` | `tgi_batch_current_size` + `tgi_queue_size` > 0 | sum 0 |
| `gate` | `GET /_gate/status` | any active generation, for any model | count 0 and an empty list |
| `llama-swap` | `GET /running` | a model `starting`, `ready` or `stopping` | never (see below) |
| `ollama` | `GET /api/ps`, twice | a model whose reported expiry moves with the clock | never (see below) |

For the Prometheus pages the "running" gauge is required (without it the page
is another server's) and the queue gauge optional.

`llama-swap` never says idle. An empty `/running` is not a statement that
nothing runs: llama-swap before its routing rewrite (2026) lists only
`ready` processes, so a model being loaded from cold (the minutes this gate
exists for) is absent, and a peer model (served by another llama-swap) is
never listed. A model `starting` or `ready` (any model: on a shared GPU ours
waits behind it or is being loaded) or `stopping` (evicted to make room) is
busy. llama-swap does not say whether a `ready` model is working on our
request: busy holds the wait up to the ceiling, as for any busy answer.

`ollama` never says idle, and says busy only when it can tell. Ollama has no
endpoint that reports work in progress; `/api/ps` lists the models it holds
in memory. While a model has not yet gone idle since it was loaded (it is
being loaded, or has had a request in flight ever since), Ollama reports its
expiry as "now + keep-alive", computed on each call; once a model has gone
idle its expiry is a fixed time. So the probe asks twice, 0.2 s apart: an
expiry that moved is a model being loaded or still on its first work ->
busy. Everything else is no signal: a resident model with a fixed expiry may
be serving a later request or be idle (Ollama does not say), an empty list
may hide a request waiting for memory or the start of a load, and Ollama
releases `/api/ps` only after a load completes (since its scheduler snapshot
of 2026), so a probe during such a load times out, which is no signal.

`auto` tries them in the table's order (one `/metrics` fetch serves all four
readers of it) and sticks to the first that gives a signal.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Literal, get_args
from urllib.parse import urlsplit

import httpx
from firstgate.common.durations import require_positive_seconds
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .gate import ProbeAnswer

ProbeKind = Literal[
    "auto",
    "llama.cpp-slots",
    "llama.cpp-metrics",
    "vllm",
    "sglang",
    "tgi",
    "gate",
    "llama-swap",
    "ollama",
    "off",
]
PROBE_KINDS: tuple[str, ...] = get_args(ProbeKind)
DEFAULT_PROBE_TIMEOUT_S = 4.0
# A status body is small; a vLLM /metrics page is tens of KiB. Anything far
# larger is not what we asked for.
_MAX_BODY_BYTES = 4 * 1024 * 1024

SLOTS_PATH = "/slots"
METRICS_PATH = "/metrics"
GATE_STATUS_PATH = "/_gate/status"
LLAMA_SWAP_RUNNING_PATH = "/running"
OLLAMA_PS_PATH = "/api/ps"
# Between Ollama's two answers: long enough for its clock (nanoseconds) to move,
# short against the probe timeout.
OLLAMA_SECOND_LOOK_S = 0.2


# --- wire bodies -------------------------------------------------------------


class Slot(BaseModel):
    """One entry of llama.cpp's `GET /slots` (only the field we read)."""

    model_config = ConfigDict(extra="ignore")
    id: int | None = None
    is_processing: bool


_SLOTS = TypeAdapter(list[Slot])


class ActiveGeneration(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str | int | None = None
    model: str | None = None
    path: str | None = None
    client_host: str | None = None
    started_at: float | str | None = None
    age_s: float | None = None


class GateStatus(BaseModel):
    """`GET /_gate/status` of a gate in front of a model server."""

    model_config = ConfigDict(extra="ignore")
    active_generation_count: int = Field(ge=0)
    active_generations: list[ActiveGeneration]


class LlamaSwapProcess(BaseModel):
    """One entry of llama-swap's `GET /running` (`{"running": [...]}`)."""

    model_config = ConfigDict(extra="ignore")
    model: str
    state: str


class LlamaSwapRunning(BaseModel):
    model_config = ConfigDict(extra="ignore")
    running: list[LlamaSwapProcess]


# llama-swap's process states (internal/process/process.go); `stopped` and
# `shutdown` are never listed by current versions.
LLAMA_SWAP_BUSY_STATES = frozenset({"starting", "ready", "stopping"})
LLAMA_SWAP_STATES = LLAMA_SWAP_BUSY_STATES | {"stopped", "shutdown"}


class OllamaModel(BaseModel):
    """One entry of Ollama's `GET /api/ps` (`{"models": [...]}`)."""

    model_config = ConfigDict(extra="ignore")
    name: str
    model: str | None = None
    expires_at: datetime


class OllamaPs(BaseModel):
    model_config = ConfigDict(extra="ignore")
    models: list[OllamaModel]


# --- origins and credentials -------------------------------------------------


def origin_of(url: str) -> str:
    """`scheme://host:port` of a URL (default ports made explicit, host lower-cased)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"a probe needs an http(s) base_url, got {url!r}")
    port = parts.port or (443 if scheme == "https" else 80)
    host = parts.hostname.lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def auth_headers(probe_url: str, route_base_url: str, api_key: str | None) -> dict[str, str]:
    """The route's key goes only to the route's own origin, never to another host."""
    if not api_key or origin_of(probe_url) != origin_of(route_base_url):
        return {}
    return {"Authorization": f"Bearer {api_key}"}


# --- reading Prometheus text -------------------------------------------------


def metric_values(text: str, name: str) -> list[float]:
    """Every sample of metric `name` (any labels) in Prometheus text exposition format."""
    values: list[float] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            metric = line[: line.index("{")]
            # Label values may contain spaces; the value follows the last brace.
            rest = line[line.rindex("}") + 1 :]
        else:
            metric, _, rest = line.partition(" ")
        if metric.strip() != name:
            continue
        fields = rest.split()
        if not fields:
            raise ValueError(f"sample of {name} without a value")
        values.append(float(fields[0]))
    return values


def _sum_of(text: str, name: str) -> float | None:
    values = metric_values(text, name)
    if not values:
        return None
    total = math.fsum(values)
    if not math.isfinite(total) or total < 0:
        raise ValueError(f"{name} is {total}")
    return total


# --- interpreting bodies (pure: body -> answer; raise on anything unexpected) --


def interpret_slots(body: bytes) -> ProbeAnswer:
    slots = _SLOTS.validate_json(body)
    if not slots:
        return None  # no slots at all is not a statement that nothing runs
    return "busy" if any(slot.is_processing for slot in slots) else "idle"


def _running_or_waiting(body: bytes, running: str, waiting: str) -> ProbeAnswer:
    """Busy while the `running` metric (required) plus `waiting` is above 0: a
    request waiting for a slot means the server is not empty either."""
    text = body.decode("utf-8")
    now = _sum_of(text, running)
    if now is None:
        return None
    queued = _sum_of(text, waiting) or 0.0
    return "busy" if now + queued > 0 else "idle"


def interpret_llamacpp_metrics(body: bytes) -> ProbeAnswer:
    return _running_or_waiting(body, "llamacpp:requests_processing", "llamacpp:requests_deferred")


def interpret_vllm_metrics(body: bytes) -> ProbeAnswer:
    return _running_or_waiting(body, "vllm:num_requests_running", "vllm:num_requests_waiting")


def interpret_sglang_metrics(body: bytes) -> ProbeAnswer:
    # One series per scheduler rank (tp/pp/dp labels): their sum is > 0 when any runs.
    return _running_or_waiting(body, "sglang:num_running_reqs", "sglang:num_queue_reqs")


def interpret_tgi_metrics(body: bytes) -> ProbeAnswer:
    return _running_or_waiting(body, "tgi_batch_current_size", "tgi_queue_size")


def interpret_llama_swap_running(body: bytes) -> ProbeAnswer:
    listing = LlamaSwapRunning.model_validate_json(body)
    states = {process.state for process in listing.running}
    if not states <= LLAMA_SWAP_STATES:
        raise ValueError(f"unknown llama-swap states {sorted(states - LLAMA_SWAP_STATES)}")
    # Never "idle": an empty list is not proof that nothing runs (module docstring).
    return "busy" if states & LLAMA_SWAP_BUSY_STATES else None


def ollama_models(body: bytes) -> dict[str, datetime]:
    """Each listed model's reported expiry (raises on a body that is not `/api/ps`)."""
    listing = OllamaPs.model_validate_json(body)
    return {entry.name: entry.expires_at for entry in listing.models}


def interpret_ollama_ps(first: bytes, second: bytes) -> ProbeAnswer:
    """Two answers of `/api/ps`: busy when a model's expiry moved between them
    (Ollama computes "now + keep-alive" on each call for a model that has not
    gone idle since it was loaded); otherwise no signal, never idle."""
    before, after = ollama_models(first), ollama_models(second)
    for name, expires in after.items():
        earlier = before.get(name)
        if earlier is not None and expires > earlier:
            return "busy"
    return None


def interpret_gate_status(body: bytes) -> ProbeAnswer:
    status = GateStatus.model_validate_json(body)
    # A generation for another model counts too: on a single-GPU host our
    # model is being swapped back in behind it.
    if status.active_generation_count > 0 or status.active_generations:
        return "busy"
    return "idle"


Interpreter = Callable[[bytes], ProbeAnswer]


class _Look:
    """One probe round: one client, one deadline, each path fetched at most once
    unless an endpoint asks again."""

    def __init__(self, fetcher: _Fetcher, client: httpx.Client, deadline: float) -> None:
        self._fetcher = fetcher
        self._client = client
        self.deadline = deadline
        self._bodies: dict[str, bytes | None] = {}

    def get(self, path: str, *, again: bool = False) -> bytes | None:
        if again or path not in self._bodies:
            self._bodies[path] = self._fetcher.get(self._client, path, self.deadline)
        return self._bodies[path]

    def pause(self, seconds: float) -> bool:
        """Sleeps `seconds` if the round's deadline leaves room for another request after it."""
        if self.deadline - time.monotonic() < 2 * seconds:
            return False
        time.sleep(seconds)
        return True


class Endpoint:
    """One kind of status endpoint: where it is and how its answer reads."""

    def __init__(self, path: str, interpret: Interpreter) -> None:
        self.path = path
        self.interpret = interpret

    def ask(self, look: _Look) -> ProbeAnswer:
        return _interpret(self.interpret, look.get(self.path))


class OllamaEndpoint(Endpoint):
    """`/api/ps` read twice (see `interpret_ollama_ps`); the second look only when
    the first lists a model."""

    def __init__(self) -> None:
        super().__init__(OLLAMA_PS_PATH, lambda body: None)

    def ask(self, look: _Look) -> ProbeAnswer:
        first = look.get(self.path)
        if first is None:
            return None
        try:
            if not ollama_models(first):
                return None
        except (ValidationError, ValueError, UnicodeDecodeError):
            return None
        if not look.pause(OLLAMA_SECOND_LOOK_S):
            return None
        second = look.get(self.path, again=True)
        if second is None:
            return None
        try:
            answer = interpret_ollama_ps(first, second)
        except (ValidationError, ValueError, UnicodeDecodeError):
            return None
        return answer if answer in ("busy", "idle") else None


# kind -> endpoint, in the order `auto` tries them.
ENDPOINTS: dict[str, Endpoint] = {
    "llama.cpp-slots": Endpoint(SLOTS_PATH, interpret_slots),
    "llama.cpp-metrics": Endpoint(METRICS_PATH, interpret_llamacpp_metrics),
    "vllm": Endpoint(METRICS_PATH, interpret_vllm_metrics),
    "sglang": Endpoint(METRICS_PATH, interpret_sglang_metrics),
    "tgi": Endpoint(METRICS_PATH, interpret_tgi_metrics),
    "gate": Endpoint(GATE_STATUS_PATH, interpret_gate_status),
    "llama-swap": Endpoint(LLAMA_SWAP_RUNNING_PATH, interpret_llama_swap_running),
    "ollama": OllamaEndpoint(),
}


# --- the probes ----------------------------------------------------------------


class _Fetcher:
    """GETs paths on the route's origin with a total deadline per call."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        self.base_url = base_url
        self.origin = origin_of(base_url)
        self._api_key = api_key
        self.timeout = timeout

    def __repr__(self) -> str:  # never show the key
        return f"_Fetcher(origin={self.origin!r}, timeout={self.timeout})"

    def client(self) -> httpx.Client:
        # A fresh plain client per probe round: probes are minutes apart, and
        # a pool shared with nothing has nothing to reuse. No env proxies and
        # no redirects: both could take the key to another host.
        return httpx.Client(
            timeout=httpx.Timeout(self.timeout),
            follow_redirects=False,
            trust_env=False,
        )

    def get(self, client: httpx.Client, path: str, deadline: float) -> bytes | None:
        """The body of a 200 answer, or None for anything else."""
        url = self.origin + path
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        headers = {"Accept": "*/*", **auth_headers(url, self.base_url, self._api_key)}
        try:
            with client.stream("GET", url, headers=headers, timeout=left) as response:
                if response.status_code != 200:
                    return None
                # A server that answers every path with a chat stream (a catch-all
                # proxy, a test double) would hold the watchdog for the whole probe
                # timeout: a status page is never an event stream.
                content_type = response.headers.get("content-type", "")
                if content_type.split(";")[0].strip().lower() == "text/event-stream":
                    return None
                body = b""
                for part in response.iter_bytes():
                    body += part
                    # httpx bounds each read; a server that trickles bytes
                    # must not hold the watchdog past the probe's total.
                    if len(body) > _MAX_BODY_BYTES or time.monotonic() > deadline:
                        return None
                return body
        except (httpx.HTTPError, OSError, ValueError):
            return None


def _interpret(interpreter: Interpreter, body: bytes | None) -> ProbeAnswer:
    if body is None:
        return None
    try:
        answer = interpreter(body)
    except (ValidationError, ValueError, UnicodeDecodeError):
        return None
    return answer if answer in ("busy", "idle") else None


class EndpointProbe:
    """One fixed endpoint kind (any of `ENDPOINTS`)."""

    def __init__(
        self,
        kind: str,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = DEFAULT_PROBE_TIMEOUT_S,
    ) -> None:
        if kind not in ENDPOINTS:
            raise ValueError(f"unknown probe kind {kind!r}; expected one of {PROBE_KINDS}")
        self.kind = kind
        self.model = model
        self._endpoint = ENDPOINTS[kind]
        self._fetcher = _Fetcher(base_url, api_key, timeout)
        self.last_answer: ProbeAnswer = None

    def __repr__(self) -> str:
        return f"EndpointProbe({self.kind!r}, {self._fetcher.origin!r})"

    @property
    def url(self) -> str:
        return self._fetcher.origin + self._endpoint.path

    def __call__(self) -> ProbeAnswer:
        try:
            deadline = time.monotonic() + self._fetcher.timeout
            with self._fetcher.client() as client:
                self.last_answer = self._endpoint.ask(_Look(self._fetcher, client, deadline))
        except Exception:  # a probe never raises: any failure is "no signal"
            self.last_answer = None
        return self.last_answer


class AutoProbe:
    """Tries every kind of `ENDPOINTS` in order; sticks to the first kind that
    gives a signal (busy or idle) for the rest of its life.

    One round shares one total timeout and fetches each path (`/metrics`) at most once.
    """

    ORDER: tuple[str, ...] = tuple(ENDPOINTS)

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = DEFAULT_PROBE_TIMEOUT_S,
    ) -> None:
        self.model = model
        self._fetcher = _Fetcher(base_url, api_key, timeout)
        self._lock = threading.Lock()
        self.chosen: str | None = None
        self.last_answer: ProbeAnswer = None

    def __repr__(self) -> str:
        return f"AutoProbe({self._fetcher.origin!r}, chosen={self.chosen!r})"

    def __call__(self) -> ProbeAnswer:
        try:
            self.last_answer = self._round()
        except Exception:  # a probe never raises: any failure is "no signal"
            self.last_answer = None
        return self.last_answer

    def _round(self) -> ProbeAnswer:
        with self._lock:
            chosen = self.chosen
        kinds = (chosen,) if chosen else self.ORDER
        deadline = time.monotonic() + self._fetcher.timeout
        with self._fetcher.client() as client:
            look = _Look(self._fetcher, client, deadline)
            for kind in kinds:
                answer = ENDPOINTS[kind].ask(look)
                if answer is not None:
                    with self._lock:
                        self.chosen = self.chosen or kind
                    return answer
        return None


Probe = EndpointProbe | AutoProbe


def make_probe(
    kind: str,
    base_url: str,
    api_key: str | None = None,
    model: str | None = None,
    timeout: float = DEFAULT_PROBE_TIMEOUT_S,
) -> Probe | None:
    """A probe for the route at `base_url`, or None for `off`.

    Raises ValueError for an unknown kind, a non-http(s) base_url or a
    timeout that is not a positive finite number (a configuration mistake
    must not silently become "no probe").
    """
    if kind not in PROBE_KINDS:
        raise ValueError(f"unknown liveness probe {kind!r}; expected one of {PROBE_KINDS}")
    require_positive_seconds(timeout, "probe timeout")
    if kind == "off":
        return None
    origin_of(base_url)  # validate early
    if kind == "auto":
        return AutoProbe(base_url, api_key, model, float(timeout))
    return EndpointProbe(kind, base_url, api_key, model, float(timeout))
