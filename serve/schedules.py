"""`firstgate serve` runs the schedules of its workflow apps: each enabled
`trigger-schedule` node fires at every time its cron expression (or the
editor's visual settings) names in its time zone, and the run starts as an
API run starts (`Runs.start`: here, or queued for a worker with `--broker`).

Exactly once per tick however many API processes run: before it fires, a
process claims the tick (`Runs.claim_tick` with the app, the node and the
tick's time). In one process that is always yes; with `--broker` it is a
Redis `SET NX` on `firstgate:tick:<app>:<node>:<epoch>`, so the first
process to ask fires and the others skip. Why not Celery beat: beat is one
more process that must run exactly once (two beats fire twice, none fires
never); a claim per tick needs no such singleton, any number of API
processes may come and go. A tick missed while no process ran is not
fired later (Dify computes the next run from now, too).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from firstgate.nodes import trigger_schedule
from firstgate.nodes.trigger_schedule.cron import Cron
from firstgate.runtime.dsl.graph import NodeDef
from firstgate.serve.apps import App, AppDirectory
from firstgate.serve.errors import ApiError
from firstgate.serve.launch import RunRequest
from firstgate.serve.runs import Runs
from firstgate.store.base import TRIGGERED_SCHEDULE

log = logging.getLogger("firstgate.serve")

SCHEDULE_USER = "trigger-schedule"  # the run's user: nobody asked for it
# A tick this late (a process suspended, a clock stepped) is the last one fired:
# the next is counted from now, not every missed one in a burst.
CATCH_UP_S = 60.0


@dataclass(frozen=True, slots=True)
class Schedule:
    app: App
    node: NodeDef
    cron: Cron
    zone: ZoneInfo
    text: str  # the cron expression, as reported

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        return self.cron.next_after(moment, self.zone)

    def tick_key(self, tick: dt.datetime) -> str:
        return f"{self.app.workflow.app_id}:{self.node.id}:{int(tick.timestamp())}"


def schedules(apps: AppDirectory) -> list[Schedule]:
    found: list[Schedule] = []
    for app in apps.apps.values():
        for node in app.workflow.roots:
            data = node.data
            if isinstance(data, trigger_schedule.Data) and data.enabled:
                found.append(Schedule(app, node, data.schedule(), data.zone(), data.cron_text()))
    return found


class Scheduler:
    """One thread (a greenlet under gevent) per schedule, sleeping until its next tick."""

    def __init__(
        self,
        plans: list[Schedule],
        runs: Runs,
        *,
        base_url: Callable[[], str] = lambda: "",
        now: Callable[[], float] = time.time,
    ) -> None:
        self.plans = plans
        self.runs = runs
        self.base_url = base_url
        self.now = now
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.fired = 0  # ticks this process fired

    def start(self) -> None:
        for plan in self.plans:
            thread = threading.Thread(
                target=self._loop, args=(plan,), name=f"schedule-{plan.node.id}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()

    def _moment(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.now(), dt.UTC)

    def _loop(self, plan: Schedule) -> None:
        tick = plan.next_after(self._moment())
        while not self._stopping.is_set():
            wait = tick.timestamp() - self.now()
            if wait > 0 and self._stopping.wait(wait):
                return
            if self.now() < tick.timestamp():
                continue  # woke early
            self.fire(plan, tick)
            following = plan.next_after(tick)
            if following.timestamp() < self.now() - CATCH_UP_S:
                following = plan.next_after(self._moment())
            tick = following

    def fire(self, plan: Schedule, tick: dt.datetime) -> bool:
        """Start the tick's run if this process claims it; whether it did."""
        if not self.runs.accepting or not self.runs.claim_tick(plan.tick_key(tick)):
            return False
        request = RunRequest(
            app_stem=plan.app.stem,
            inputs={},
            user=SCHEDULE_USER,
            base_url=self.base_url(),
            root=plan.node.id,
            triggered_from=TRIGGERED_SCHEDULE,
        )
        try:
            self.runs.start(plan.app, request)
        except ApiError as exc:  # the run could not start: the next tick tries again
            log.warning(
                "scheduled run of %s (%s) not started: %s", plan.app.name, plan.node.id, exc
            )
            return False
        except Exception:  # noqa: BLE001 - a broken tick must not end the schedule
            log.exception("scheduled run of %s (%s) failed to start", plan.app.name, plan.node.id)
            return False
        self.fired += 1
        return True
