"""Runs in flight: each run's events go into its own stream, which any number of
readers follow (a streaming reply, a blocking reply, nobody at all).

The HTTP side sees runs through one interface, `Runs`: `start` takes an
accepted `RunRequest` and gives back a `RunHandle` whose `stream` (an
`EventSource`) any request may follow from any position, `stop` asks whoever
holds the run to end it. `RunManager` is the in-process implementation: the
run executes here (a thread, a greenlet under gevent) and publishes to an
in-memory `EventStream`. `serve/distributed/` is the other: runs execute on
Celery workers and their events travel through Redis Streams.

Reading never drives the run: a client that disconnects stops reading, and the
run goes on to its end and is recorded (Dify's behaviour); only `stop` ends it
early.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from firstgate.locales import t
from firstgate.runtime.execution.checkpoint import PAUSED, RUNNING, CheckpointError, paused_of_task
from firstgate.runtime.execution.engine import WorkflowRun
from firstgate.runtime.execution.events import RunInfo
from firstgate.serve.apps import App
from firstgate.serve.errors import ApiError, dump_json
from firstgate.serve.launch import Launcher, RunRequest
from firstgate.serve.timeline import TimelineRecorder
from firstgate.store.base import FormRecord, Store

log = logging.getLogger("firstgate.serve")

# How long a finished run's events stay readable (a blocking caller, a late reader).
KEEP_FINISHED_S = 300.0
# How long the server is idle before its runs' garbage is collected (`_ended`).
IDLE_COLLECT_S = 0.05
# How long a stop waits for a run that just paused to be let go by its engine.
PAUSE_SETTLE_S = 5.0


class EventSource(ABC):
    """One run's events as a reader sees them: positions count from 0, `read(after)`
    gives the events after the first `after` (the shape of Redis' `XREAD`)."""

    @abstractmethod
    def read(self, after: int, timeout: float) -> tuple[list[bytes], bool]:
        """Events from position `after` on, waiting up to `timeout` for one; and whether
        the stream has ended (nothing more will come after these)."""

    @property
    @abstractmethod
    def ended(self) -> bool: ...

    def follow(
        self, idle: float, after: int = 0, *, through_pauses: bool = False
    ) -> Iterator[bytes | None]:
        """Every event from position `after` until the end; None each time `idle`
        seconds pass without one. A paused run's stream stays open for its
        resumption: a reader stops at `workflow_paused` unless `through_pauses`
        (Dify's `continue_on_pause`)."""
        seen = after
        while True:
            batch, ended = self.read(seen, idle)
            seen += len(batch)
            for event in batch:
                yield event
                if not through_pauses and is_pause(event):
                    return
            if ended:
                return
            if not batch:
                yield None

    def events(self) -> list[dict[str, Any]]:
        """The events so far, decoded."""
        batch, _ = self.read(0, 0)
        return [json.loads(e) for e in batch]


_PAUSED = b'{"event": "workflow_paused"'


def is_pause(event: bytes) -> bool:
    """Whether an encoded event is `workflow_paused` (the envelope's first key)."""
    return event.startswith(_PAUSED)


class EventStream(EventSource):
    """One run's events, in order, readable from any index.

    Each event is kept as its JSON text (Dify's wire form, encoded once): what a
    streaming reply sends as is, what a later stream store (Redis) would hold,
    and, unlike nested dicts, nothing the garbage collector has to walk while
    thousands of runs are kept."""

    def __init__(self, first: int = 0) -> None:
        # A run resumed in another process than the one it paused in: its stream
        # here starts at the position it paused at (the earlier events are gone).
        self._first = first
        self._events: list[bytes] = []
        self._ended = False
        self._changed = threading.Condition()
        self.ended_at: float | None = None

    def publish(self, event: dict[str, Any]) -> None:
        encoded = dump_json(event)
        with self._changed:
            self._events.append(encoded)
            self._changed.notify_all()

    def end(self) -> None:
        with self._changed:
            if not self._ended:
                self._ended = True
                self.ended_at = time.monotonic()
            self._changed.notify_all()

    @property
    def ended(self) -> bool:
        return self._ended

    def read(self, after: int, timeout: float) -> tuple[list[bytes], bool]:
        index = max(0, after - self._first)
        with self._changed:
            if len(self._events) <= index and not self._ended:
                self._changed.wait(timeout)
            return self._events[index:], self._ended

    @property
    def first(self) -> int:
        return self._first

    def last_is_pause(self) -> bool:
        with self._changed:
            return bool(self._events) and is_pause(self._events[-1])


@dataclass(slots=True)
class RunHandle:
    """What the HTTP side knows of a run in flight."""

    task_id: str
    workflow_run_id: str
    app_stem: str
    app_id: str
    user: str
    chat: bool
    stream: EventSource
    stop: Callable[[str], None]
    started_at: float = field(default_factory=time.time)
    stopped_by: str | None = None


class EventSink(Protocol):
    """Where a run's events go: an in-memory `EventStream`, a Redis stream."""

    def publish(self, event: dict[str, Any]) -> None: ...

    def end(self) -> None: ...


class Runs(ABC):
    """The runs the HTTP side starts, follows and stops, wherever they execute."""

    accepting: bool
    # Whether `resume_form` can resume a paused run (checked before a form is
    # closed, so that a submit it cannot act on leaves the form open).
    resumes_forms: bool = False

    @abstractmethod
    def start(self, app: App, request: RunRequest) -> RunHandle:
        """Start (or queue) a run; ApiError when it cannot start."""

    def resume_form(self, app: App, form: FormRecord) -> None:
        """Resume the paused run of a closed human-input form (`runtime/human_input.py`)."""
        raise ApiError(501, "not_implemented", "serve.error.resumeOnWorkers")

    @abstractmethod
    def get(self, task_id: str) -> RunHandle | None: ...

    def claim_tick(self, key: str) -> bool:
        """Whether this process fires a schedule's tick (`key`: app, node, time).
        Runs that execute in this process answer for this process alone: yes."""
        return True

    @abstractmethod
    def by_run_id(self, workflow_run_id: str) -> RunHandle | None: ...

    @abstractmethod
    def stop(self, task_id: str, *, app: App, user: str, reason: str) -> bool:
        """Stop a run of this app and user; False when there is no such run in flight
        (or waiting paused in the store)."""

    @property
    @abstractmethod
    def active(self) -> int:
        """Runs started here and not yet ended."""

    @abstractmethod
    def drain(self, grace: float, reason: str, settle: float = 10.0) -> None:
        """Stop taking runs, let those in flight finish within `grace` seconds, then
        stop the rest and wait for them to be recorded, `settle` seconds at most."""

    @abstractmethod
    def close(self) -> None:
        """Let go of what the runs hold (connections)."""


class Executor(ABC):
    """Runs a started workflow run and publishes its events."""

    @abstractmethod
    def execute(self, run: WorkflowRun, stream: EventSink, on_end: Callable[[], None]) -> None:
        """Start draining `run` into `stream`; return at once."""


class ThreadExecutor(Executor):
    """In this process: a thread per run (a greenlet when gevent has patched threading)."""

    def execute(self, run: WorkflowRun, stream: EventSink, on_end: Callable[[], None]) -> None:
        threading.Thread(
            target=drain_run,
            args=(run, stream, on_end),
            kwargs={"open_while_paused": True},
            name=f"run-{run.run_id}",
            daemon=True,
        ).start()


# The event after which a run sends nothing more (the engine may still be
# cleaning up: worker threads, connections); its stream ends right there.
def _last_event(run: WorkflowRun) -> tuple[str, ...]:
    # A paused run's stream ends with `workflow_paused` (chatflows too: no message_end).
    if run.info.chat:
        return ("message_end", "error", "workflow_paused")
    return ("workflow_finished", "workflow_paused")


def drain_run(
    run: WorkflowRun,
    stream: EventSink,
    on_end: Callable[[], None],
    *,
    open_while_paused: bool = False,
) -> None:
    """Publish every event of `run` into `stream`, end the stream with the run's last
    event, then call `on_end` (after the engine's own clean-up). A run that
    paused leaves its stream open when `open_while_paused` (its resumption
    publishes into the same stream, positions going on). The run's timeline
    (`serve/timeline.py`) goes to its store just before that last event; a
    resumed run's goes on from what was kept before its pause."""
    last = _last_event(run)
    if open_while_paused:
        last = tuple(name for name in last if name != "workflow_paused")
    store = run.session.store  # where the run is recorded; its timeline goes with it
    timeline = TimelineRecorder(prior=store.timeline(run.run_id) if store is not None else None)
    kept = False
    try:
        for event in run:
            wire = event.to_dict()
            timeline.see(wire)
            if store is not None and not kept and wire["event"] in last:
                # Kept before the last event goes out (the run's record is written
                # by then): a reader that asks for the timeline at the end finds it.
                timeline.save(store, run.run_id)
                kept = True
            stream.publish(wire)
            if wire["event"] in last:
                stream.end()
    except Exception:  # noqa: BLE001 - the engine reports failures as events; this is a bug
        log.exception("run %s failed outside the engine", run.run_id)
        stream.publish(_internal_error(run))
    finally:
        if not (open_while_paused and run.status == PAUSED):
            stream.end()
        on_end()


def _pausing(handle: RunHandle) -> bool:
    """Whether the run's last event so far is `workflow_paused`."""
    stream = handle.stream
    return isinstance(stream, EventStream) and stream.last_is_pause()


def _handle(
    app: App, info: RunInfo, user: str, stream: EventStream, stop: Callable[[str], None]
) -> RunHandle:
    return RunHandle(
        task_id=info.task_id,
        workflow_run_id=info.workflow_run_id,
        app_stem=app.stem,
        app_id=info.app_id,
        user=user,
        chat=info.chat,
        stream=stream,
        stop=stop,
    )


def _give_up(store: Store, run_id: str, reason: str) -> None:
    """An interrupted run that cannot be resumed ends `failed`, saying why."""
    log.warning("run %s cannot be resumed: %s", run_id, reason)
    known = store.run(run_id)
    if known is not None and known.status in (RUNNING, PAUSED):
        store.record_run(
            dataclasses.replace(
                known, status="failed", error=reason, finished_at=time.time(), nodes=(), files=()
            )
        )
    store.delete_checkpoint(run_id)


def _internal_error(run: WorkflowRun) -> dict[str, Any]:
    # What went wrong is in the log: an exception's words are no reply.
    return {
        **run.info.envelope("error"),
        "status": 500,
        "code": "internal_server_error",
        "message": t("serve.error.internal"),
    }


# How a paused run is ended when it is stopped (store, its stream, its ids, the reason).
EndPaused = Callable[[Store, EventSink, RunInfo, str], None]


def _already_ended(reason: str) -> None:
    """`stop` of a run that has ended: nothing to do."""


class RunManager(Runs):
    """The runs of one server process, executed here, by task id."""

    def __init__(
        self,
        launcher: Launcher,
        executor: Executor | None = None,
        *,
        end_paused: EndPaused | None = None,
    ) -> None:
        """`end_paused` ends a run paused here when it is stopped (`serve/human_input.py`
        gives it: that module builds on this one); without it such a stop does nothing."""
        self.launcher = launcher
        self._end_paused = end_paused
        self.executor = executor or ThreadExecutor()
        self._runs: dict[str, RunHandle] = {}
        self._by_run_id: dict[str, str] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._active = 0
        self._paused: set[str] = set()  # task ids of runs paused here (nothing runs them)
        self._garbage = False  # runs ended since the last idle collection
        self._collector: threading.Thread | None = None
        self.accepting = True

    def start(self, app: App, request: RunRequest) -> RunHandle:
        run = self.launcher.open(app, request)
        handle = _handle(app, run.info, request.user, EventStream(), run.abort)
        with self._lock:
            self._forget_old()
            self._register(handle)
            self._active += 1
        self.executor.execute(run, handle.stream, lambda: self._ended(handle, run.info))
        return handle

    resumes_forms = True

    def resume_form(self, app: App, form: FormRecord) -> None:
        run = self.launcher.resume_form(app, form)
        info = run.info
        with self._lock:
            task_id = self._by_run_id.get(info.workflow_run_id)
            handle = self._runs.get(task_id) if task_id else None
            if handle is None or handle.stream.ended:
                # Paused in another process (or long ago): a stream from here on.
                fresh = EventStream(first=run.position)
                handle = _handle(app, info, info.user_id, fresh, run.abort)
                self._register(handle)
            else:
                handle.stop = run.abort
            self._paused.discard(handle.task_id)
            self._active += 1
            self._idle.notify_all()  # a stop waiting for the pause to settle takes this run
        stream = handle.stream
        assert isinstance(stream, EventStream)
        self.executor.execute(run, stream, lambda: self._ended(handle, run.info))

    def adopt(self, app: App, run: WorkflowRun, user: str) -> RunHandle:
        """Execute an already started `run` here (one resumed from its checkpoint)."""
        handle = _handle(app, run.info, user, EventStream(), run.abort)
        with self._lock:
            self._register(handle)
            self._active += 1
        self.executor.execute(run, handle.stream, lambda: self._ended(handle, run.info))
        return handle

    def resume_interrupted(self, apps: Mapping[str, App]) -> list[str]:
        """Runs that were running when this server last stopped (their checkpoint
        says running and nobody holds it): resumed here from their checkpoint, or
        ended `failed` with the reason when that cannot be (their app changed or
        is gone). Paused runs wait for whoever resumes them. The ids resumed."""
        store = self.launcher.store
        by_app = {app.workflow.app_id: app for app in apps.values()}
        resumed: list[str] = []
        for record in store.checkpoints(RUNNING):
            app = by_app.get(record.app_id)
            try:
                if app is None:
                    raise CheckpointError("errors.checkpoint.appGone", run=record.run_id)
                run = self.launcher.resume(app, record.run_id)
            except (ApiError, CheckpointError) as error:
                if error.message_key == "errors.checkpoint.busy":
                    continue  # another process holds it (it is not an interrupted run)
                _give_up(store, record.run_id, str(error))
                continue
            self.adopt(app, run, run.info.user_id)
            resumed.append(record.run_id)
        return resumed

    def _ended(self, handle: RunHandle, info: RunInfo) -> None:
        # Let the run go: a finished handle keeps its events, not the engine's
        # objects (thousands of those would make every garbage collection slow).
        # A paused one (its stream still open) is stopped here: nothing runs it.
        paused = not handle.stream.ended
        with self._lock:
            handle.stop = _already_ended
            if paused:
                self._paused.add(handle.task_id)
                handle.stop = functools.partial(self._stop_paused, handle, info)
            self._active -= 1
            if self._active == 0:
                self._garbage = True
                if self._collector is None:
                    self._collector = threading.Thread(
                        target=self._collect_when_idle, name="firstgate-idle-gc", daemon=True
                    )
                    self._collector.start()
            self._idle.notify_all()

    def _collect_when_idle(self) -> None:
        """The runs' cyclic garbage, collected while nothing runs: the full pass it
        needs would otherwise land in the middle of a later stream (or a stop) as a
        pause of hundreds of milliseconds. Only once the server has been idle
        `IDLE_COLLECT_S`: at once, it would hold back the last bytes of the stream
        that just ended (its writer runs after the run's own thread)."""
        while True:
            with self._lock:
                while not (self._garbage and self._active == 0):
                    self._idle.wait()
                quiet_until = time.monotonic() + IDLE_COLLECT_S
                while self._active == 0 and (left := quiet_until - time.monotonic()) > 0:
                    self._idle.wait(left)
                if self._active:
                    continue  # a run started: collected when the server is idle again
                self._garbage = False
            gc.collect()

    def _stop_paused(self, handle: RunHandle, info: RunInfo, reason: str) -> None:
        """End a paused run as stopped: its forms closed, its record and stream
        ended (`human_input.end_paused`), unless a form resumed it meanwhile."""
        with self._lock:
            if handle.task_id not in self._paused:
                resumed = handle.stop  # a form's answer took it on: stop that run
            else:
                resumed = None
                self._paused.discard(handle.task_id)
                handle.stop = _already_ended
        if resumed is not None:
            resumed(reason)
            return
        stream = handle.stream
        assert isinstance(stream, EventStream)
        if self._end_paused is not None:
            self._end_paused(self.launcher.store, stream, info, reason)

    def _register(self, handle: RunHandle) -> None:
        """`handle` found by its task and run ids (under the lock)."""
        self._runs[handle.task_id] = handle
        self._by_run_id[handle.workflow_run_id] = handle.task_id

    def _forget_old(self) -> None:
        now = time.monotonic()
        for task_id, handle in list(self._runs.items()):
            ended = handle.stream.ended_at
            if ended is not None and now - ended > KEEP_FINISHED_S:
                del self._runs[task_id]
                self._by_run_id.pop(handle.workflow_run_id, None)

    def get(self, task_id: str) -> RunHandle | None:
        with self._lock:
            return self._runs.get(task_id)

    def by_run_id(self, workflow_run_id: str) -> RunHandle | None:
        with self._lock:
            task_id = self._by_run_id.get(workflow_run_id)
            return self._runs.get(task_id) if task_id else None

    def stop(self, task_id: str, *, app: App, user: str, reason: str) -> bool:
        handle = self.get(task_id)
        if handle is None:
            return self._stop_stored(task_id, app=app, user=user, reason=reason)
        if handle.app_id != app.workflow.app_id or handle.user != user:
            return False
        if handle.stream.ended:
            return False
        handle.stopped_by = reason
        with self._lock:
            # Paused, its engine still letting go (`workflow_paused` out, `_ended`
            # not run yet): the stop waits for `_ended`, or it would go to an engine
            # that no longer runs the run, and be lost.
            first, give_up = handle.stop, time.monotonic() + PAUSE_SETTLE_S
            while handle.stop is first and handle.task_id not in self._paused and _pausing(handle):
                left = give_up - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(left)
            stop = handle.stop
        stop(reason)
        return True

    def _stop_stored(self, task_id: str, *, app: App, user: str, reason: str) -> bool:
        """A run this process has no handle of (it paused before this process
        started): when it waits paused in the store, it ends here, its stream
        (from the position it paused at) here for whoever follows it."""
        if self._end_paused is None:
            return False
        found = paused_of_task(self.launcher.store, task_id)
        if found is None:
            return False
        snapshot, record = found
        info = snapshot.run.info()
        if info.app_id != app.workflow.app_id or info.user_id != user:
            return False
        stream = EventStream(first=record.position)
        handle = _handle(app, info, user, stream, _already_ended)
        handle.stopped_by = reason
        with self._lock:
            self._register(handle)
        self._end_paused(self.launcher.store, handle.stream, info, reason)
        return True

    @property
    def active(self) -> int:
        with self._lock:
            return self._active

    def close(self) -> None:
        """Nothing to let go of: the runs hold no connections of their own."""

    def drain(self, grace: float, reason: str, settle: float = 10.0) -> None:
        # The rest are recorded as `stopped` with what they had.
        self.accepting = False
        give_up = time.monotonic() + max(0.0, grace)
        with self._lock:
            while self._active and time.monotonic() < give_up:
                self._idle.wait(give_up - time.monotonic())
            # A paused run is not stopped: it waits in the store for its form.
            left = [
                h
                for h in self._runs.values()
                if not h.stream.ended and h.task_id not in self._paused
            ]
        for handle in left:
            handle.stopped_by = reason
            handle.stop(reason)
        settle_until = time.monotonic() + settle
        with self._lock:
            while self._active and time.monotonic() < settle_until:
                self._idle.wait(settle_until - time.monotonic())
