"""What serve makes of trigger apps before any request: each webhook's id and
path, and the schedules it runs (a disabled one loads and never fires), and a
tick's claim and run through `Runs` without waiting for the clock."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from firstgate.serve.apps import load_directory
from firstgate.serve.distributed.worker import QueuedRun
from firstgate.serve.launch import RunRequest
from firstgate.serve.runs import Runs
from firstgate.serve.schedules import Scheduler, schedules
from firstgate.serve.webhooks import webhooks
from pydantic import ValidationError

from tests.integration.test_triggers_serve import BARE_APP, CORPUS, DIFY_ID, TICK_APP


def directory(tmp_path: Path, **texts: str) -> Path:
    for stem, text in texts.items():
        (tmp_path / f"{stem}.yml").write_text(text)
    return tmp_path


def test_webhook_ids_keep_difys_else_come_from_the_key(tmp_path: Path) -> None:
    apps_dir = directory(
        tmp_path,
        orders=(CORPUS / "trigger_webhook_workflow.yml").read_text(),
        bare=BARE_APP,
    )
    keys = {
        "FIRSTGATE_APP_KEY_ORDERS": "orders-key-0123",
        "FIRSTGATE_APP_KEY_BARE": "bare-key-0123",
    }
    found = webhooks(load_directory(apps_dir, keys))
    assert DIFY_ID in found and found[DIFY_ID].path == f"/triggers/webhook/{DIFY_ID}"
    (derived,) = [h for h in found.values() if h.app.stem == "bare"]
    assert len(derived.id) == 24
    # The same key gives the same id (restarts, other processes); another key another.
    again = webhooks(load_directory(apps_dir, keys))
    assert derived.id in again
    other = {**keys, "FIRSTGATE_APP_KEY_BARE": "another-key-0123"}
    assert derived.id not in webhooks(load_directory(apps_dir, other))


def test_a_disabled_schedule_is_not_run(tmp_path: Path) -> None:
    apps_dir = directory(
        tmp_path,
        on=TICK_APP.replace("'* * * * * *'", "'*/5 * * * *'"),
        off=TICK_APP.replace("'* * * * * *'", "'*/5 * * * *'").replace(
            "enabled: true", "enabled: false"
        ),
    )
    keys = {"FIRSTGATE_APP_KEY_ON": "on-key-01234567", "FIRSTGATE_APP_KEY_OFF": "off-key-0123456"}
    apps = load_directory(apps_dir, keys)
    assert sorted(apps.apps) == ["off", "on"]
    assert [plan.app.stem for plan in schedules(apps)] == ["on"]


class Recorded(Runs):
    """A `Runs` that records what it was asked (claims answered from a set, as Redis would)."""

    accepting = True

    def __init__(self) -> None:
        self.claimed: set[str] = set()
        self.started: list[tuple[str, str | None]] = []

    def claim_tick(self, key: str) -> bool:
        if key in self.claimed:
            return False
        self.claimed.add(key)
        return True

    def start(self, app, request):  # type: ignore[no-untyped-def]
        self.started.append((app.stem, request.root))
        return None  # type: ignore[return-value]

    def get(self, task_id):  # type: ignore[no-untyped-def]
        return None

    def by_run_id(self, workflow_run_id):  # type: ignore[no-untyped-def]
        return None

    def stop(self, task_id, *, app, user, reason):  # type: ignore[no-untyped-def]
        return False

    @property
    def active(self) -> int:
        return 0

    def drain(self, grace, reason, settle=10.0):  # type: ignore[no-untyped-def]
        self.accepting = False

    def close(self) -> None:
        pass


def test_a_tick_fires_once_and_starts_from_its_schedule_node(tmp_path: Path) -> None:
    apps_dir = directory(tmp_path, tick=TICK_APP.replace("'* * * * * *'", "'0 9 * * *'"))
    (plan,) = schedules(load_directory(apps_dir, {"FIRSTGATE_APP_KEY_TICK": "tick-key-0123456"}))
    runs = Recorded()
    scheduler = Scheduler([plan], runs)
    tick = plan.next_after(dt.datetime(2026, 6, 1, tzinfo=dt.UTC))
    # Midnight UTC is noon in Auckland: its next 9:00 is the next day.
    assert tick.isoformat() == "2026-06-02T09:00:00+12:00"
    assert scheduler.fire(plan, tick) and not scheduler.fire(plan, tick)
    assert runs.started == [("tick", "tick")]
    runs.drain(0, "stop")
    assert not scheduler.fire(plan, plan.next_after(tick))


def test_a_queued_run_says_how_it_was_started_in_difys_words() -> None:
    request = RunRequest(app_stem="tick", inputs={}, user="u", triggered_from="schedule")
    assert QueuedRun.model_validate(request.to_dict()).triggered_from == "schedule"
    assert QueuedRun.model_validate({**request.to_dict(), "triggered_from": "webhook"})
    # A message the worker did not expect is refused (a poison message), not recorded.
    with pytest.raises(ValidationError):
        QueuedRun.model_validate({**request.to_dict(), "triggered_from": "debugging"})
