"""`Runs` for an API process whose runs execute on Celery workers.

`start` checks the request here (bad input is a 400 at once, as in-process),
records the run in Redis, queues it, and waits briefly for its first entry:
a run the worker could not start (an unset credential, a busy conversation)
is then Dify's error reply, as in-process; a run still queued after that
wait is answered anyway, its reply beginning when a worker takes it. Any API
process can follow any run's stream and stop any run: both go through Redis,
not through the process that queued it.

A closed human-input form (a submit to any API process, a deadline) queues
its paused run again (`RunStore.reopen`): any worker resumes it from its
checkpoint with the answer, its stream going on under the same ids. The
store is the truth of a paused run: one that waited longer than Redis keeps
its keys is written to Redis again from its checkpoint (`RunStore.revive`:
its ids, request and position) and queued all the same. A stop of a paused
run, which no worker holds to hear it, is carried out by the API process
that receives it (`human_input.end_paused`); a stop of a paused run Redis no
longer knows finds it in the store by its task id and writes it again first.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid

from celery import Celery
from firstgate.runtime.execution import checkpoint as cp
from firstgate.runtime.execution.events import RunInfo
from firstgate.serve import human_input
from firstgate.serve.apps import App
from firstgate.serve.distributed.celery_app import TASK_NAME, make_celery
from firstgate.serve.distributed.run_state import (
    EventSink,
    RedisEventStream,
    RunStore,
    info_dict,
    share_file_links,
)
from firstgate.serve.distributed.settings import DistributedSettings, reachable, redis_client
from firstgate.serve.errors import ApiError
from firstgate.serve.launch import Launcher, RunRequest
from firstgate.serve.runs import RunHandle, Runs
from firstgate.store.base import CheckpointRecord, FormRecord

log = logging.getLogger("firstgate.serve")

# How long `start` waits for a worker to take the run before answering anyway.
START_WAIT_S = 2.0
# A schedule tick's claim outlives any clock skew between API processes.
TICK_KEEP_S = 24 * 3600


class RemoteRuns(Runs):
    def __init__(
        self,
        launcher: Launcher,
        celery: Celery,
        runs: RunStore,
        settings: DistributedSettings,
        start_wait: float = START_WAIT_S,
    ) -> None:
        self.launcher = launcher
        self.celery = celery
        self.runs = runs
        self.settings = settings
        self.start_wait = start_wait
        self.accepting = True

    def start(self, app: App, request: RunRequest) -> RunHandle:
        self.launcher.check(app, request)
        meta = _meta(app, request, time.time())
        self.runs.queue(request.task_id, request.workflow_run_id, meta)
        self.celery.send_task(
            TASK_NAME,
            kwargs={"request": request.to_dict()},
            task_id=request.task_id,
            queue=self.settings.queue,
        )
        handle = self._handle(request.task_id, meta)
        # The first entry: the run's first event, or why it could not start.
        handle.stream.read(0, self.start_wait)
        refused = handle.stream.refused  # type: ignore[attr-defined]
        if refused is not None:
            raise ApiError.from_dict(refused)
        return handle

    def _handle(self, task_id: str, meta: dict[str, str]) -> RunHandle:
        return RunHandle(
            task_id=task_id,
            workflow_run_id=meta["workflow_run_id"],
            app_stem=meta["app_stem"],
            app_id=meta["app_id"],
            user=meta["user"],
            chat=bool(meta.get("chat")),
            stream=RedisEventStream(self.runs.redis, task_id, int(meta.get("first") or 0)),
            stop=lambda reason: self._stop(task_id, reason),
            started_at=float(meta.get("created_at") or time.time()),
        )

    resumes_forms = True

    def resume_form(self, app: App, form: FormRecord) -> None:
        task_id = self.runs.task_for_run(form.workflow_run_id)
        verdict = self.runs.reopen(task_id, form.token) if task_id else "unknown"
        if verdict == "unknown":
            # It waited longer than Redis keeps its keys: the store still has it.
            task_id, verdict = self._revive(app, form)
        if verdict == "queued":
            meta = self.runs.meta(str(task_id))
            self.celery.send_task(
                TASK_NAME,
                kwargs={"request": json.loads(meta["request"])},
                queue=self.settings.queue,
            )
        elif verdict in ("unknown", "finished"):
            log.warning("the run of form %s has ended (%s)", form.id, verdict)

    def _revive(self, app: App, form: FormRecord) -> tuple[str | None, str]:
        """The run of `form` written to Redis again from its checkpoint (its task
        and run ids, request, identity, the position its stream goes on from),
        named with the form and `queued`; 'unknown' when it has no checkpoint (it
        ended). Known after all (another process revived it): reopened as usual."""
        taken = cp.head(self.launcher.store, form.workflow_run_id)
        if taken is None:
            return None, "unknown"
        snapshot, found = taken
        info = snapshot.run.info()
        fields = {**_revived(app, snapshot, found), "state": "queued", "form": form.token}
        if self.runs.revive(info.task_id, info.workflow_run_id, fields):
            log.warning("the run of form %s was written to the broker again", form.id)
            return info.task_id, "queued"
        return info.task_id, self.runs.reopen(info.task_id, form.token)

    def claim_tick(self, key: str) -> bool:
        """The first API process to set the tick's key fires it; every other one
        finds it set (one Redis `SET NX`, atomic however many processes ask)."""
        owner = f"{socket.gethostname()}:{os.getpid()}"
        return bool(self.runs.redis.set(f"firstgate:tick:{key}", owner, nx=True, ex=TICK_KEEP_S))

    def get(self, task_id: str) -> RunHandle | None:
        meta = self.runs.meta(task_id)
        if "workflow_run_id" not in meta:
            return None
        return self._handle(task_id, meta)

    def by_run_id(self, workflow_run_id: str) -> RunHandle | None:
        task_id = self.runs.task_for_run(workflow_run_id)
        return self.get(task_id) if task_id else None

    def stop(self, task_id: str, *, app: App, user: str, reason: str) -> bool:
        meta = self.runs.meta(task_id) or self._revive_paused(app, task_id)
        if meta.get("app_id") != app.workflow.app_id or meta.get("user") != user:
            return False
        if meta.get("state") == "finished":
            return False
        self._stop(task_id, reason)
        return True

    def _revive_paused(self, app: App, task_id: str) -> dict[str, str]:
        """A run of `task_id` that waits paused in the store and that Redis no
        longer knows, written to Redis again (`paused`, as it was) so that its stop
        goes as any paused run's; its hash, or {} when there is no such run."""
        found = cp.paused_of_task(self.launcher.store, task_id)
        if found is None:
            return {}
        snapshot, record = found
        if record.app_id != app.workflow.app_id:
            return {}
        info = snapshot.run.info()
        fields = {**_revived(app, snapshot, record), "state": "paused"}
        if self.runs.revive(info.task_id, info.workflow_run_id, fields):
            log.warning("the paused run of task %s was written to the broker again", task_id)
        return self.runs.meta(task_id)

    def _stop(self, task_id: str, reason: str) -> None:
        """The stop flag for the run's holder; a paused run is ended here at once."""
        stopper = f"{socket.gethostname()}:{os.getpid()}:stop:{uuid.uuid4().hex[:8]}"
        if self.runs.request_stop(task_id, reason, stopper, self.settings.lease):
            info = RunInfo(**json.loads(self.runs.meta(task_id)["info"]))
            sink = EventSink(self.runs, task_id, stopper, lambda: None)
            human_input.end_paused(self.launcher.store, sink, info, reason)

    @property
    def active(self) -> int:
        # Runs execute on the workers: an API process that drains leaves them running.
        return 0

    def drain(self, grace: float, reason: str, settle: float = 10.0) -> None:
        self.accepting = False

    def close(self) -> None:
        self.runs.redis.close()


def _revived(app: App, snapshot: cp.Snapshot, found: CheckpointRecord) -> dict[str, str]:
    """The hash of a run Redis no longer knows, from its checkpoint: its task and
    run ids, request and identity, the position its stream goes on from (its
    `state` is the caller's)."""
    info = snapshot.run.info()
    request = RunRequest(
        app_stem=app.stem,
        inputs={},  # a resumed run's inputs come from its checkpoint
        user=info.user_id,
        query=snapshot.query,
        conversation_id=info.conversation_id,
        root=snapshot.root,
        task_id=info.task_id,
        workflow_run_id=info.workflow_run_id,
    )
    return {
        **_meta(app, request, snapshot.started_at),
        "info": json.dumps(info_dict(info)),
        "attempts": "0",
        "seq": str(found.position),
        "first": str(found.position),
    }


def _meta(app: App, request: RunRequest, created_at: float) -> dict[str, str]:
    """A queued run's hash in Redis: the request, and whose run it is."""
    return {
        "request": json.dumps(request.to_dict(), ensure_ascii=False),
        "app_stem": app.stem,
        "app_id": app.workflow.app_id,
        "user": request.user,
        "chat": "1" if app.chat else "",
        "workflow_run_id": request.workflow_run_id,
        "created_at": f"{created_at:.3f}",
    }


def connect(launcher: Launcher, settings: DistributedSettings) -> RemoteRuns:
    """The API side of the distributed mode, connected to the broker's Redis."""
    client = reachable(redis_client(settings.broker), settings.broker)
    share_file_links(launcher, client)
    store = RunStore(client, keep_finished=settings.keep_finished)
    return RemoteRuns(launcher, make_celery(settings), store, settings)
