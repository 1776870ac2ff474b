"""The default code executor: a pool of pre-started sandbox workers.

`ProcessSandbox.execute` takes an idle worker, hands it the job and waits for
the answer. The worker runs every job in a fresh, confined process of its own
(see `sandbox/worker/zygote.py` for the layers), so a job that crashes, times
out or exceeds a limit takes only its own process down. A worker that itself
stops answering, sends nonsense or dies is killed and replaced in the
background; the job gets a typed error either way.

Under gevent (monkey-patched), the pool's threads, queue, sockets and
subprocesses are gevent's: waiting for a job blocks only its greenlet.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from firstgate.common.cancel import Cancellable
from firstgate.sandbox.confinement import BASE_ENV, find_interpreters, read_only_paths
from firstgate.sandbox.errors import (
    CodeCancelledError,
    CodeExecutionError,
    CodeRuntimeUnavailableError,
    CodeTimeoutError,
)
from firstgate.sandbox.executor import Language, OutputLimits, traced
from firstgate.sandbox.outcomes import RUNTIMES, result_or_raise
from firstgate.sandbox.worker_process import (
    SandboxLimits,
    WorkerBroken,
    WorkerConfig,
    WorkerProcess,
    WorkerTimeout,
    reap_stale_dirs,
)

# How often a caller waiting for a free worker looks at its cancel token.
_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class ProcessSandboxConfig:
    workers: int = 2
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    network: bool = False
    require_landlock: bool = True
    python: str | None = None  # default: this interpreter
    node: str | None = None  # default: `node` on PATH
    output_limits: OutputLimits = field(default_factory=OutputLimits)
    # The Jinja2 options template jobs use (see WorkerConfig.jinja_options).
    jinja_options: dict[str, Any] | None = None
    # Tests only (not in the settings file): see WorkerConfig.landlock_max_abi.
    landlock_max_abi: int | None = None


class ProcessSandbox:
    """The pool. Start it once per process (or run); close it with the run."""

    def __init__(self, config: ProcessSandboxConfig | None = None) -> None:
        self.config = config or ProcessSandboxConfig()
        self.output_limits = self.config.output_limits
        self._idle: queue.Queue[WorkerProcess] = queue.Queue()
        self._lock = threading.Lock()
        self._workers: set[WorkerProcess] = set()
        self._worker_config: WorkerConfig | None = None
        self._started = False
        self._closed = False
        self._failure: CodeExecutionError | None = None  # why workers cannot start
        # Never leak processes, even if nobody calls close().
        self._finalizer = weakref.finalize(self, _stop_all, self._workers)

    # ---- life cycle

    def start(self) -> None:
        """Start the workers (in parallel) and wait until they are ready."""
        with self._lock:
            if self._started:
                return
            if self._closed:
                raise CodeRuntimeUnavailableError("errors.code.executorClosed")
            self._worker_config = self._make_worker_config()
            self._started = True
        reap_stale_dirs()
        threads = [
            threading.Thread(target=self._add_worker, daemon=True)
            for _ in range(max(1, self.config.workers))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if not self._workers and self._failure is not None:
            raise self._failure

    def _make_worker_config(self) -> WorkerConfig:
        interpreters = find_interpreters(self.config.python, self.config.node)
        return WorkerConfig(
            python=interpreters.python,
            node=interpreters.node,
            read_only=tuple(read_only_paths(interpreters)),
            env=dict(BASE_ENV),
            limits=self.config.limits,
            network=self.config.network,
            require_landlock=self.config.require_landlock,
            jinja_options=self.config.jinja_options,
            landlock_max_abi=self.config.landlock_max_abi,
        )

    def _add_worker(self) -> None:
        assert self._worker_config is not None
        try:
            worker = WorkerProcess(self._worker_config)
        except CodeExecutionError as exc:
            self._failure = exc
            return
        with self._lock:
            if self._closed:
                worker.stop()
                return
            self._workers.add(worker)
        self._idle.put(worker)

    def _replace(self, worker: WorkerProcess) -> None:
        with self._lock:
            self._workers.discard(worker)
        worker.stop(grace_s=0)
        if not self._closed:
            threading.Thread(target=self._add_worker, daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._finalizer()

    @property
    def isolation(self) -> dict[str, Any]:
        """What confines the jobs (the first worker's report)."""
        for worker in list(self._workers):
            return dict(worker.isolation)
        return {}

    # ---- jobs

    @traced
    def execute(
        self,
        language: Language,
        code: str,
        inputs: Mapping[str, Any],
        *,
        cancel: Cancellable | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        self.start()
        assert self._worker_config is not None
        if language == "javascript" and not self._worker_config.node:
            raise CodeRuntimeUnavailableError(
                "errors.code.runtimeMissing", language=language, runtime=RUNTIMES[language]
            )
        job = {"language": language, "code": code, "inputs": dict(inputs), **(options or {})}
        worker = self._take(cancel)
        healthy = False
        try:
            answer = worker.run(job, cancel)
            healthy = True
        except WorkerTimeout:
            limit = self.config.limits.wall_s
            raise CodeTimeoutError("errors.code.timeout", limit=f"{limit:g}") from None
        except WorkerBroken as exc:
            if _cancelled(cancel):
                raise CodeCancelledError("errors.code.cancelled") from None
            raise CodeExecutionError("errors.code.workerFailed", detail=str(exc)) from None
        finally:
            if healthy:
                self._idle.put(worker)
            else:
                self._replace(worker)
        return result_or_raise(answer, language)

    def _take(self, cancel: Cancellable | None) -> WorkerProcess:
        """An idle worker; waits while all are busy (or being replaced)."""
        cancelled = threading.Event()
        attached = cancel.attached(lambda _reason: cancelled.set()) if cancel else None
        with attached or contextlib.nullcontext():
            while True:
                if cancelled.is_set():
                    raise CodeCancelledError("errors.code.cancelled")
                try:
                    return self._idle.get(timeout=_POLL_S)
                except queue.Empty:
                    pass
                with self._lock:
                    dead = not self._workers and self._failure is not None
                if dead:
                    assert self._failure is not None
                    raise self._failure


def _cancelled(cancel: Cancellable | None) -> bool:
    return bool(getattr(cancel, "cancelled", False))


def _stop_all(workers: set[WorkerProcess]) -> None:
    started = time.monotonic()
    for worker in list(workers):
        worker.stop(grace_s=max(0.0, 0.5 - (time.monotonic() - started)))
    workers.clear()
