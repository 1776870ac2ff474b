"""A cancellation token shared by one workflow run and every node attempt in it,
and `Cancellable`, what every layer below the engine asks of it.

The engine cancels it on abort, failure or a limit; an LLM node attaches its
gate so the in-flight socket is shut down at once instead of timing out. A
container's rounds run under a `child()` token: cancelled with the run, or on
its own when the container stops its rounds early.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol


class Cancellable(Protocol):
    """The cancel token as a client, the sandbox or a connector sees it: call
    `on_cancel(reason)` if the token is cancelled while inside the block (at
    once when it already is)."""

    def attached(self, on_cancel: Callable[[str], None]) -> AbstractContextManager[None]: ...


class CancelToken:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._reason: str | None = None
        self._callbacks: dict[int, Callable[[str], None]] = {}
        self._next_id = 0
        self._detach: Callable[[], None] | None = None

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

    def child(self) -> CancelToken:
        """A token cancelled when this one is (at once, in the cancelling thread),
        and which can be cancelled on its own. `release()` it when done."""
        child = CancelToken()
        with self._lock:
            key = self._next_id
            self._next_id += 1
            self._callbacks[key] = child.cancel
            already = self._reason if self._event.is_set() else None

        def detach() -> None:
            with self._lock:
                self._callbacks.pop(key, None)

        child._detach = detach
        if already is not None:
            child.cancel(already)
        return child

    def release(self) -> None:
        """Stop following the parent token (a child whose work is done)."""
        if self._detach is not None:
            self._detach()
            self._detach = None

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
