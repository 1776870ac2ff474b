"""The connectors one run (or one process) uses, built from the runtime settings."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from connectors.guarded_http import (
    DEFAULT_MAX_BINARY_BYTES,
    DEFAULT_MAX_REDIRECTS,
    DEFAULT_MAX_TEXT_BYTES,
    GuardedHttp,
    HttpLimits,
)
from connectors.net_policy import NetworkPolicy


@dataclass
class Connectors:
    """What nodes that reach the outside world get through their `NodeContext`.

    `settings` is the runtime settings file (any object with its `http_request`,
    `knowledge` and `tools` sections; absent sections mean the defaults).
    """

    settings: Any = None
    _http: GuardedHttp | None = field(default=None, init=False, repr=False)
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def from_settings(cls, settings: Any) -> Connectors:
        return cls(settings)

    def section(self, name: str) -> Any:
        return getattr(self.settings, name, None)

    @property
    def http(self) -> GuardedHttp:
        with self._lock:
            if self._http is None:
                section = self.section("http_request")
                self._http = GuardedHttp(
                    NetworkPolicy(getattr(section, "allow", ())),
                    HttpLimits(
                        max_redirects=getattr(section, "max_redirects", DEFAULT_MAX_REDIRECTS),
                        max_text_bytes=getattr(section, "max_text_bytes", DEFAULT_MAX_TEXT_BYTES),
                        max_binary_bytes=getattr(
                            section, "max_binary_bytes", DEFAULT_MAX_BINARY_BYTES
                        ),
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
