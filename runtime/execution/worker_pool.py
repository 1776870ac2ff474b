"""A small pool of worker threads (greenlets when gevent has patched threading).

Each job runs in a fresh copy of the submitting context: a ContextVar set in
one job never leaks into the next job on the same worker.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable

_STOP = object()


class WorkerPool:
    def __init__(self, size: int, name: str = "firstgate-worker") -> None:
        self._size = max(1, size)
        self._name = name
        self._jobs: queue.Queue[object] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        context = contextvars.copy_context()
        with self._lock:
            # Grow only when every worker is busy, up to the limit.
            if self._idle == 0 and len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._idle -= 1
        self._jobs.put(lambda: context.run(job))

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            try:
                job()  # type: ignore[operator]
            except Exception:  # noqa: BLE001 - jobs report their own errors; keep the worker alive
                pass
            finally:
                with self._lock:
                    self._idle += 1

    def shutdown(self, timeout: float = 2.0) -> None:
        for _ in self._threads:
            self._jobs.put(_STOP)
        for thread in self._threads:
            thread.join(timeout)
