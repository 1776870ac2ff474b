"""`firstgate runs [RUN_ID]`: the runs in the state database, newest first, with
their status and progress (a running run's steps and elapsed time, as its last
checkpoint wrote them), or one run's node executions in order."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sys

from firstgate.runtime.cli.messages import render_error
from firstgate.store import StoreError, open_store
from firstgate.store.base import RunRecord, Store
from firstgate.store.sqlite import default_path

from firstgate import locales

DEFAULT_LIMIT = 20
EXIT_OK = 0
EXIT_INVALID = 2


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    runs = commands.add_parser(
        "runs", help="list recent runs and their progress, or one run's node executions"
    )
    runs.add_argument("run", nargs="?", metavar="RUN_ID", help="show this run's node executions")
    runs.add_argument(
        "--state", metavar="DB", help="the state database (default: the user's data directory)"
    )
    runs.add_argument("--status", help="only runs of this status (running, paused, succeeded...)")
    runs.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="how many runs to list")
    runs.add_argument("--json", action="store_true", help="one JSON object per line")
    runs.add_argument("--locale")


def cmd_runs(args: argparse.Namespace, locale: str) -> int:
    where = args.state or str(default_path())
    try:
        with contextlib.closing(open_store(args.state)) as store:
            if args.run:
                return _one(store, args.run, where, locale, args.json)
            return _list(store, args, where, locale)
    except StoreError as exc:
        message = locales.t("cli.invalidInput", locale, error=render_error(exc, locale))
        print(message, file=sys.stderr)
        return EXIT_INVALID


def _list(store: Store, args: argparse.Namespace, where: str, locale: str) -> int:
    runs = store.recent_runs(status=args.status, limit=max(1, args.limit))
    if not runs and not args.json:
        print(locales.t("cli.runs.none", locale, state=where))
    for run in runs:
        if args.json:
            print(json.dumps(_run_fields(run), ensure_ascii=False))
        else:
            print(locales.t("cli.runs.line", locale, **_run_fields(run)))
    return EXIT_OK


def _one(store: Store, run_id: str, where: str, locale: str, as_json: bool) -> int:
    run = store.run(run_id)
    if run is None:
        print(locales.t("cli.runs.unknown", locale, run=run_id, state=where), file=sys.stderr)
        return EXIT_INVALID
    if as_json:
        print(json.dumps(_run_fields(run), ensure_ascii=False))
    else:
        print(locales.t("cli.runs.line", locale, **_run_fields(run)))
    for node in run.nodes:
        fields = {
            "index": node.index,
            "node": node.node_id,
            "title": node.title,
            "type": node.node_type,
            "status": node.status,
            "elapsed": round(node.elapsed_time, 3),
        }
        if as_json:
            print(json.dumps(fields, ensure_ascii=False))
        else:
            print(locales.t("cli.runs.node", locale, **fields))
    return EXIT_OK


def _run_fields(run: RunRecord) -> dict[str, object]:
    started = datetime.datetime.fromtimestamp(run.created_at, datetime.UTC)
    return {
        "id": run.id,
        "status": run.status,
        "steps": run.total_steps,
        "elapsed": round(run.elapsed_time, 3),
        "started": started.isoformat(timespec="seconds"),
    }
