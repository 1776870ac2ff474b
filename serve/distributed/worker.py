"""`firstgate worker`: one Celery worker process on the gevent pool, executing the
runs that `firstgate serve --broker` queues.

Each run is a greenlet (the gate's ContextVar budgets and the run's cancel
token are per greenlet, as in-process). Beside the runs, three greenlets:

- the heartbeat renews the lease of every run held here; a renewal refused
  (someone took the run over: this process hung past its lease) aborts the
  run here, and the fenced stream takes nothing more from it;
- the stop listener follows the `stops` channel and aborts the run named, at
  once (the gate cancels its in-flight model stream at the socket); after a
  reconnection it reads the stop flags of every run held here, so a stop sent
  while Redis was away is not lost;
- the sweeper ends runs whose lease lapsed (their worker was killed or hangs):
  re-queued while `max_attempts` allows, else ended `failed` with a clear
  error, in the stream and in the store, within about a lease.

A run that pauses at a human-input node is let go (`RunStore.pause`): nothing
of it stays here while it waits. When its form is closed (an API process, a
deadline) the run is queued again and any worker resumes it from its
checkpoint with the form's answer (`Launcher.resume_form`), its stream going
on under the same ids and positions.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gevent
import redis
from celery import Celery
from firstgate.common import metrics
from firstgate.locales import t
from firstgate.runtime import human_input as hi
from firstgate.runtime.execution.checkpoint import PAUSED, RUNNING, Resolved
from firstgate.runtime.execution.engine import WorkflowRun
from firstgate.runtime.execution.events import ErrorEvent, RunInfo, WorkflowFailed
from firstgate.serve import human_input
from firstgate.serve.apps import App, AppDirectory
from firstgate.serve.distributed.celery_app import TASK_NAME, make_celery, set_dead_letter_sink
from firstgate.serve.distributed.run_state import (
    STOP_CHANNEL,
    EventSink,
    RunStore,
    info_dict,
    share_file_links,
)
from firstgate.serve.distributed.settings import DistributedSettings, reachable, redis_client
from firstgate.serve.errors import ApiError, not_found
from firstgate.serve.launch import Launcher, RunRequest
from firstgate.serve.runs import drain_run
from firstgate.store.base import FORM_WAITING, TRIGGERED_APP_RUN, TRIGGERED_FROM, RunRecord
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

log = logging.getLogger("firstgate.worker")

# After the run's own time limit, how long its engine gets to end it before the
# worker gives the run up as failed (a node that does not heed the cancel).
HARD_LIMIT_GRACE_S = 30.0


class QueuedRun(BaseModel):
    """A `firstgate.run` message's one argument: the queued `RunRequest`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    app_stem: str = Field(min_length=1, max_length=500)
    inputs: dict[str, Any]
    user: str = Field(max_length=1000)
    files: list[dict[str, Any]] | None = None
    query: str | None = None
    conversation_id: str | None = Field(default=None, max_length=100)
    base_url: str = Field(default="", max_length=2000)
    root: str | None = Field(default=None, max_length=200)
    triggered_from: str = TRIGGERED_APP_RUN

    @field_validator("triggered_from")
    @classmethod
    def _known_trigger(cls, value: str) -> str:
        if value not in TRIGGERED_FROM:
            raise ValueError(f"triggered_from is one of {', '.join(TRIGGERED_FROM)}")
        return value

    task_id: str = Field(min_length=1, max_length=100)
    workflow_run_id: str = Field(min_length=1, max_length=100)
    traceparent: str | None = Field(default=None, max_length=256)


class HardLimit(Exception):
    """The run outlived its time limit and the grace after it."""


@dataclass(slots=True)
class HeldRun:
    run: WorkflowRun
    owner: str
    sink: EventSink


class WorkerRuntime:
    """What one worker process holds: the apps, what runs share, the runs held here."""

    def __init__(
        self,
        apps: AppDirectory,
        launcher: Launcher,
        runs: RunStore,
        celery: Celery,
        settings: DistributedSettings,
        *,
        locale: str | None = None,
    ) -> None:
        self.apps = apps
        self.launcher = launcher
        self.runs = runs
        self.celery = celery
        self.settings = settings
        self.locale = locale
        self.worker_id = f"{socket.gethostname()}.{uuid.uuid4().hex[:8]}"
        self.held: dict[str, HeldRun] = {}
        # Runs claimed here and still starting (task -> owner): a turn waiting for
        # its conversation (an earlier turn in progress) is held all that while.
        self.opening: dict[str, str] = {}
        self._greenlets: list[gevent.Greenlet] = []

    # ---- the task

    def execute(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """One `firstgate.run` message."""
        try:
            if args or set(kwargs) != {"request"}:
                raise TypeError("one keyword argument, `request`, is expected")
            queued = QueuedRun.model_validate(kwargs["request"])
        except (TypeError, ValidationError) as exc:
            self.runs.dead_letter(
                "malformed", {"args": list(args), "kwargs": dict(kwargs)}, error=str(exc)[:2000]
            )
            return
        request = RunRequest(**queued.model_dump())
        owner = f"{self.worker_id}:{uuid.uuid4().hex[:8]}"
        claim = self.runs.claim(
            request.task_id, owner, self.settings.lease, self.settings.max_attempts
        )
        if claim == "unknown":
            self.runs.dead_letter("no-such-run", request.to_dict())
            return
        if claim == "exhausted":
            self.sweep_one(request.task_id)
            return
        if claim != "claimed":
            return  # finished, or held by a live worker: a second delivery does nothing
        self._execute_claimed(request, owner)

    def _execute_claimed(self, request: RunRequest, owner: str) -> None:
        task_id = request.task_id
        held: HeldRun | None = None

        def lost() -> None:
            if held is not None:
                held.run.abort(t("serve.worker.lostHold", self.locale))

        sink = EventSink(self.runs, task_id, owner, lost)
        app = self.apps.apps.get(request.app_stem)
        form_token = self.runs.meta(task_id).get("form", "")
        self.opening[task_id] = owner
        try:
            if app is None:
                raise not_found("serve.worker.noApp", app=request.app_stem)
            if self.launcher.has_checkpoint(request.workflow_run_id):
                # Paused for a form now closed, or an earlier attempt's worker died:
                # go on from its last checkpoint (this claim is the broker's lease
                # on the run, whoever the store names).
                run = self.launcher.resume(
                    app,
                    request.workflow_run_id,
                    resolved=self._answer(request.workflow_run_id, form_token),
                    take_over=True,
                )
            else:
                run = self.launcher.open(app, request)
        except ApiError as error:
            sink.refuse(error)
            sink.end()
            return
        finally:
            self.opening.pop(task_id, None)
        self.runs.set_field(task_id, "info", json.dumps(info_dict(run.info)))
        held = HeldRun(run, owner, sink)
        self.held[task_id] = held
        reason = self.runs.stop_reason(task_id)
        if reason is not None:
            run.abort(reason)
        limit = self.settings.time_limit + HARD_LIMIT_GRACE_S
        try:
            with gevent.Timeout(limit, HardLimit):
                drain_run(run, sink, lambda: None, open_while_paused=True)
        except HardLimit:
            run.abort(t("serve.worker.hardLimit", self.locale, seconds=limit))
            message = t("serve.worker.hardLimit", None, seconds=limit)
            self._fail(task_id, owner, run.info, message, app, request)
        finally:
            self.held.pop(task_id, None)
            if run.status == PAUSED and not sink.ended:
                self._let_go(sink, request, run, form_token)
            sink.end()

    def _answer(self, run_id: str, form_token: str) -> dict[str, Resolved] | None:
        """How the paused node finishes: the closed form's answer, while the run's
        checkpoint is still the pause (a resumption that crashed after the node
        finished goes on from a later checkpoint, without it)."""
        if not form_token:
            return None
        checkpoint = self.launcher.store.checkpoint(run_id, whole=False)
        form = self.launcher.store.form(form_token)
        if checkpoint is None or checkpoint.status != PAUSED or form is None:
            return None
        if form.workflow_run_id != run_id or form.status == FORM_WAITING:
            return None
        return hi.resolved_for(form)

    def _let_go(
        self, sink: EventSink, request: RunRequest, run: WorkflowRun, form_token: str
    ) -> None:
        """The run paused: nothing of it stays here; queued again at once when its
        form was closed while it was pausing, ended as stopped when a stop came
        (too late for the engine to hear it)."""
        verdict = sink.pause(form_token)
        if verdict == "requeue":
            self.celery.send_task(
                TASK_NAME, kwargs={"request": request.to_dict()}, queue=self.settings.queue
            )
        elif verdict == "stop":
            reason = self.runs.stop_reason(sink.task_id) or t("serve.stoppedByUser", self.locale)
            human_input.end_paused(self.launcher.store, sink, run.info, reason)

    # ---- ending a run that nobody can finish

    def _fail(
        self,
        task_id: str,
        owner: str,
        info: RunInfo,
        message: str,
        app: App | None,
        request: RunRequest,
    ) -> None:
        """End the run as `failed` with `message`: its last events, and its record."""
        sink = EventSink(self.runs, task_id, owner, lambda: None)
        now = time.time()
        elapsed = max(0.0, now - info.created_at)
        sink.publish(
            WorkflowFailed(
                run=info,
                elapsed=elapsed,
                finished_at=int(now),
                error_type="WorkerLost",
                error_message=message,
            ).to_dict()
        )
        if info.chat:
            sink.publish(
                ErrorEvent(
                    run=info,
                    elapsed=elapsed,
                    message=message,
                    code="internal_server_error",
                    status=500,
                ).to_dict()
            )
        store = self.launcher.store
        known = store.run(info.workflow_run_id)
        if not sink.fenced and known is not None and known.status in (RUNNING, PAUSED):
            # Its checkpoints wrote it as running: it ends failed with what it had.
            ended = dataclasses.replace(
                known, status="failed", error=message, finished_at=now, nodes=(), files=()
            )
            store.record_run(ended)
        elif not sink.fenced and known is None:
            store.record_run(
                RunRecord(
                    id=info.workflow_run_id,
                    app_id=info.app_id,
                    workflow_id=info.workflow_id,
                    mode=info.mode,
                    user_id=info.user_id,
                    status="failed",
                    inputs=request.inputs,
                    outputs={},
                    error=message,
                    elapsed_time=elapsed,
                    total_tokens=0,
                    total_steps=0,
                    exceptions_count=0,
                    created_at=float(info.created_at),
                    finished_at=now,
                    triggered_from=request.triggered_from,
                )
            )
        sink.end()

    def sweep_one(self, task_id: str) -> None:
        """A run whose lease lapsed: re-queue it or end it as failed."""
        token = f"{self.worker_id}:reaper:{uuid.uuid4().hex[:8]}"
        verdict = self.runs.reap(task_id, self.settings.max_attempts, token, self.settings.lease)
        verdict = verdict.decode() if isinstance(verdict, bytes) else verdict
        meta = self.runs.meta(task_id)
        if verdict in ("requeue", "fail"):
            metrics.lease_reaped(verdict)
        if verdict == "requeue":
            log.warning("run %s lost its worker; queued again", task_id)
            self.celery.send_task(
                TASK_NAME,
                kwargs={"request": json.loads(meta["request"])},
                queue=self.settings.queue,
            )
        elif verdict == "fail":
            log.warning("run %s lost its worker; ended as failed", task_id)
            request = RunRequest(**json.loads(meta["request"]))
            app = self.apps.apps.get(request.app_stem)
            info = _info_from(meta, request, app)
            attempts = int(meta.get("attempts") or 1)
            message = t("serve.worker.lost", None, attempts=attempts)
            self._fail(task_id, token, info, message, app, request)

    # ---- background greenlets

    def start_background(self) -> None:
        for loop in (self._heartbeat, self._listen_for_stops, self._sweep):
            self._greenlets.append(gevent.spawn(_forever, loop))

    def stop_background(self) -> None:
        gevent.killall(self._greenlets, block=False)

    def _heartbeat(self) -> None:
        while True:
            gevent.sleep(self.settings.lease / 3)
            for task_id, owner in list(self.opening.items()):
                # Refused: another took it over; the run's first publish is fenced.
                self.runs.renew(task_id, owner, self.settings.lease)
            for task_id, held in list(self.held.items()):
                if held.sink.ended:
                    continue
                if not self.runs.renew(task_id, held.owner, self.settings.lease):
                    held.sink.fenced = True
                    held.run.abort(t("serve.worker.lostHold", self.locale))

    def _sweep(self) -> None:
        while True:
            gevent.sleep(self.settings.sweep_interval)
            for task_id in self.runs.lapsed():
                self.sweep_one(task_id)

    def _listen_for_stops(self) -> None:
        pubsub = self.runs.redis.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(STOP_CHANNEL)
            # Stops sent while this listener was away (a Redis restart).
            for task_id in list(self.held):
                self._stop_if_asked(task_id)
            while True:
                message = pubsub.get_message(timeout=5.0)
                if message and message.get("type") == "message":
                    self._stop_if_asked(message["data"].decode())
        finally:
            pubsub.close()

    def _stop_if_asked(self, task_id: str) -> None:
        held = self.held.get(task_id)
        if held is None:
            return
        reason = self.runs.stop_reason(task_id)
        if reason is not None:
            held.run.abort(reason)


def _forever(loop: Any) -> None:
    """Run a background loop; start it again after a lost connection."""
    while True:
        try:
            loop()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            log.warning("%s: %s; reconnecting", loop.__name__, exc)
            gevent.sleep(0.2)
        except Exception:  # noqa: BLE001 - a bug in a loop must not end the worker's duties
            log.exception("%s failed; starting it again", loop.__name__)
            gevent.sleep(1.0)


def _info_from(meta: Mapping[str, str], request: RunRequest, app: App | None) -> RunInfo:
    """The run's identity: as its worker recorded it, else from the request."""
    if meta.get("info"):
        return RunInfo(**json.loads(meta["info"]))
    return RunInfo(
        task_id=request.task_id,
        workflow_run_id=request.workflow_run_id,
        workflow_id=app.workflow.workflow_id if app else "",
        app_id=meta.get("app_id", ""),
        mode=app.mode if app else "workflow",
        user_id=request.user,
        created_at=int(float(meta.get("created_at") or time.time())),
        conversation_id=request.conversation_id,
        message_id=None,
    )


def register(celery: Celery, runtime: WorkerRuntime) -> None:
    """The `firstgate.run` task of this worker, and where its dead letters go."""

    def run(*args: Any, **kwargs: Any) -> None:
        runtime.execute(args, kwargs)

    celery.task(name=TASK_NAME, typing=False)(run)
    set_dead_letter_sink(runtime.runs.dead_letter)


def build_worker(
    apps: AppDirectory, launcher: Launcher, settings: DistributedSettings, locale: str | None
) -> tuple[Celery, WorkerRuntime]:
    client = reachable(redis_client(settings.broker), settings.broker)
    share_file_links(launcher, client)
    runs = RunStore(client, keep_finished=settings.keep_finished)
    celery = make_celery(settings)
    runtime = WorkerRuntime(apps, launcher, runs, celery, settings, locale=locale)
    register(celery, runtime)
    return celery, runtime
