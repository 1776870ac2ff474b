"""The connectors one run (or one process) uses, built from the runtime settings."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from connectors.guarded_http import GuardedHttp, HttpLimits
from connectors.net_policy import NetworkPolicy
from connectors.settings import ConnectorSettings


@dataclass
class Connectors:
    """What nodes that reach the outside world get through their `NodeContext`."""

    settings: ConnectorSettings = field(default_factory=ConnectorSettings)
    _http: GuardedHttp | None = field(default=None, init=False, repr=False)
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def http(self) -> GuardedHttp:
        with self._lock:
            if self._http is None:
                section = self.settings.http_request
                self._http = GuardedHttp(
                    NetworkPolicy(section.allow),
                    HttpLimits(
                        max_redirects=section.max_redirects,
                        max_text_bytes=section.max_text_bytes,
                        max_binary_bytes=section.max_binary_bytes,
                    ),
                )
            return self._http

    def cached(self, key: str, build: Any) -> Any:
        """One shared instance per key (clients, indexes), built on first use."""
        with self._lock:
            if key not in self._cache:
                self._cache[key] = build()
            return self._cache[key]

    def close(self) -> None:
        with self._lock:
            if self._http is not None:
                self._http.close()
                self._http = None
            for item in self._cache.values():
                close = getattr(item, "close", None)
                if callable(close):
                    close()
            self._cache.clear()
