"""Run an asyncio coroutine from a node's synchronous code, with a time bound
and the run's cancel token, in thread mode and under gevent alike.

A node attempt runs on a worker thread (a greenlet when gevent has patched
the process). In thread mode the coroutine gets a fresh event loop on that
thread. Under gevent every greenlet shares one OS thread, where a second
event loop cannot start while another is running; the coroutine then runs
on a real thread from gevent's pool, and only the calling greenlet waits.
A cancel from any thread or greenlet cancels the coroutine's task at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from firstgate.common.cancel import Cancellable
from firstgate.connectors.errors import ConnectorError

T = TypeVar("T")


class CallTimedOut(ConnectorError):
    """The coroutine did not finish within its time bound (the caller says what it was)."""


class CallCancelled(ConnectorError):
    """The run was cancelled while the coroutine ran (the caller says what it was)."""


def _gevent_patched() -> bool:
    try:
        from gevent import monkey
    except ImportError:  # pragma: no cover - gevent is a dependency
        return False
    return bool(monkey.is_module_patched("socket"))


class _Runner:
    def __init__(self, make: Callable[[], Awaitable[T]], timeout_s: float) -> None:
        self.make = make
        self.timeout_s = timeout_s
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[T] | None = None
        self.cancelled: str | None = None

    def cancel(self, reason: str) -> None:
        with self.lock:
            self.cancelled = reason
            loop, task = self.loop, self.task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(task.cancel)

    async def main(self) -> T:
        task = asyncio.ensure_future(self._bounded())
        with self.lock:
            self.loop, self.task = asyncio.get_running_loop(), task
            if self.cancelled is not None:
                task.cancel()
        return await task

    async def _bounded(self) -> T:
        async with asyncio.timeout(self.timeout_s):
            return await self.make()

    def run(self) -> T:
        try:
            return asyncio.run(self.main())
        except TimeoutError:
            raise CallTimedOut() from None
        except asyncio.CancelledError:
            raise CallCancelled() from None


def run_async(
    make: Callable[[], Awaitable[T]], *, timeout_s: float, cancel: Cancellable | None = None
) -> T:
    """`await make()` on a private event loop, at most `timeout_s` seconds.

    Raises `CallTimedOut` or `CallCancelled`; anything else the coroutine
    raises propagates unchanged.
    """
    runner: _Runner = _Runner(make, timeout_s)
    with cancel.attached(runner.cancel) if cancel is not None else contextlib.nullcontext():
        if _gevent_patched():
            import gevent

            return gevent.get_hub().threadpool.apply(runner.run)
        return runner.run()
