"""Circuit breakers shared by every run in the process.

A server that is down stays skipped across runs. Breakers are keyed by the
route's name *and* where it points (kind, base_url, tenant, plugin), so two
settings files that reuse a name for different servers never share one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from firstgate.plugin_daemon_client.fallback import CircuitBreakers

_SHARED_LOCK = threading.Lock()
_SHARED_BREAKERS: dict[tuple[int, float], CircuitBreakers] = {}


def shared_breakers(threshold: int, cooldown_s: float) -> CircuitBreakers:
    """The process-wide breakers for these settings (one instance per setting pair)."""
    with _SHARED_LOCK:
        key = (threshold, float(cooldown_s))
        breakers = _SHARED_BREAKERS.get(key)
        if breakers is None:
            breakers = _SHARED_BREAKERS[key] = CircuitBreakers(threshold, cooldown_s)
        return breakers


def reset_shared_breakers() -> None:
    """Forget every breaker of this process (tests; an operator's "try again now")."""
    with _SHARED_LOCK:
        _SHARED_BREAKERS.clear()


class RouteBreakers:
    """The walker's breaker book for one chain: target (route) names mapped onto
    keys of the shared breakers that also say where the route points."""

    def __init__(self, shared: CircuitBreakers, keys: Mapping[str, str]) -> None:
        self.shared = shared
        self.keys = dict(keys)

    def _key(self, name: str) -> str:
        return self.keys.get(name, name)

    def open_for(self, name: str) -> float | None:
        return self.shared.open_for(self._key(name))

    def failures(self, name: str) -> int:
        return self.shared.failures(self._key(name))

    def record(self, name: str, error: Any) -> None:
        self.shared.record(self._key(name), error)
