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
| `gate` | `GET /_gate/status` | any active generation, for any model | count 0 and an empty list |

`auto` tries them in that order and sticks to the first that gives a signal.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Literal, get_args
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .durations import require_positive_seconds
from .gate import ProbeAnswer

ProbeKind = Literal["auto", "llama.cpp-slots", "llama.cpp-metrics", "vllm", "gate", "off"]
PROBE_KINDS: tuple[str, ...] = get_args(ProbeKind)
DEFAULT_PROBE_TIMEOUT_S = 4.0
# A status body is small; a vLLM /metrics page is tens of KiB. Anything far
# larger is not what we asked for.
_MAX_BODY_BYTES = 4 * 1024 * 1024

SLOTS_PATH = "/slots"
METRICS_PATH = "/metrics"
GATE_STATUS_PATH = "/_gate/status"


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


def interpret_gate_status(body: bytes) -> ProbeAnswer:
    status = GateStatus.model_validate_json(body)
    # A generation for another model counts too: on a single-GPU host our
    # model is being swapped back in behind it.
    if status.active_generation_count > 0 or status.active_generations:
        return "busy"
    return "idle"


Interpreter = Callable[[bytes], ProbeAnswer]

# kind -> (path, interpreter), in the order `auto` tries them.
ENDPOINTS: dict[str, tuple[str, Interpreter]] = {
    "llama.cpp-slots": (SLOTS_PATH, interpret_slots),
    "llama.cpp-metrics": (METRICS_PATH, interpret_llamacpp_metrics),
    "vllm": (METRICS_PATH, interpret_vllm_metrics),
    "gate": (GATE_STATUS_PATH, interpret_gate_status),
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
    """One fixed endpoint (`llama.cpp-slots`, `llama.cpp-metrics`, `vllm` or `gate`)."""

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
        self._path, self._interpreter = ENDPOINTS[kind]
        self._fetcher = _Fetcher(base_url, api_key, timeout)
        self.last_answer: ProbeAnswer = None

    def __repr__(self) -> str:
        return f"EndpointProbe({self.kind!r}, {self._fetcher.origin!r})"

    @property
    def url(self) -> str:
        return self._fetcher.origin + self._path

    def __call__(self) -> ProbeAnswer:
        try:
            deadline = time.monotonic() + self._fetcher.timeout
            with self._fetcher.client() as client:
                body = self._fetcher.get(client, self._path, deadline)
            self.last_answer = _interpret(self._interpreter, body)
        except Exception:  # a probe never raises: any failure is "no signal"
            self.last_answer = None
        return self.last_answer


class AutoProbe:
    """Tries slots, llama.cpp metrics, vLLM metrics, then the gate status; sticks to
    the first kind that gives a signal (busy or idle) for the rest of its life.

    One round shares one total timeout and fetches `/metrics` at most once.
    """

    ORDER: tuple[str, ...] = ("llama.cpp-slots", "llama.cpp-metrics", "vllm", "gate")

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
        bodies: dict[str, bytes | None] = {}
        with self._fetcher.client() as client:
            for kind in kinds:
                path, interpreter = ENDPOINTS[kind]
                if path not in bodies:
                    bodies[path] = self._fetcher.get(client, path, deadline)
                answer = _interpret(interpreter, bodies[path])
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
