"""A cancellation token shared by one workflow run and every node attempt in it.

The engine cancels it on abort, failure or a limit; an LLM node attaches its
gate so the in-flight socket is shut down at once instead of timing out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class CancelToken:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._reason: str | None = None
        self._callbacks: dict[int, Callable[[str], None]] = {}
        self._next_id = 0

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        return self._reason

    def cancel(self, reason: str) -> bool:
        """Cancel once; returns False when already cancelled."""
        with self._lock:
            if self._event.is_set():
                return False
            self._reason = reason
            self._event.set()
            callbacks = list(self._callbacks.values())
        for callback in callbacks:
            callback(reason)
        return True

    def sleep(self, seconds: float) -> bool:
        """Sleep up to `seconds`; returns True if cancelled meanwhile (wakes at once)."""
        return self._event.wait(max(seconds, 0.0))

    @contextmanager
    def attached(self, on_cancel: Callable[[str], None]) -> Iterator[None]:
        """Call `on_cancel(reason)` if the token is cancelled while inside the block.

        Registering after a cancel already happened fires at once: no window in
        which an abort can slip past a stream that is just starting.
        """
        with self._lock:
            key = self._next_id
            self._next_id += 1
            self._callbacks[key] = on_cancel
            already = self._reason if self._event.is_set() else None
        if already is not None:
            on_cancel(already)
        try:
            yield
        finally:
            with self._lock:
                self._callbacks.pop(key, None)
