"""The `firstgate worker` process: the apps, the shared run resources, the Celery
worker on the gevent pool. The standard library is patched by the CLI first.

SIGTERM is Celery's warm shutdown: no new message is taken, the runs in flight
finish, then the process exits (a second SIGTERM, or SIGQUIT, is a cold
shutdown: runs in flight are lost, and the sweepers of the other workers end
them or queue them again once their lease lapses).
"""

from __future__ import annotations

import gc
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from celery.exceptions import SecurityWarning
from celery.signals import worker_ready
from firstgate.common import metrics
from firstgate.locales import t
from firstgate.runtime.execution.checkpoint import DEFAULT_BATCH_MS, Durability
from firstgate.runtime.execution.limits import RunLimits
from firstgate.runtime.settings import RuntimeSettings
from firstgate.serve.apps import load_directory
from firstgate.serve.distributed.settings import DistributedSettings, queue_depth
from firstgate.serve.distributed.worker import build_worker
from firstgate.serve.metrics_http import start_metrics_server
from firstgate.serve.server import ServeConfig, open_resources, raise_open_file_limit, report_apps

# The start of Celery's warning to a worker run as root (celery.platforms.ROOT_DISCOURAGED).
ROOT_WARNING = "You're running the worker with superuser privileges"


def run_worker(
    apps_dir: Path,
    distributed: DistributedSettings,
    *,
    database: str,
    settings: RuntimeSettings | None,
    concurrency: int,
    locale: str | None,
    durability: Durability = Durability.BATCHED,
    durability_ms: int = DEFAULT_BATCH_MS,
    metrics_address: tuple[str, int] | None = None,
) -> int:
    """`metrics_address`: where this worker answers `/metrics` (None: nowhere)."""
    apps = load_directory(apps_dir, os.environ, settings)
    report_apps(apps, locale)
    if not apps.apps:
        print(t("serve.start.noApps", locale, dir=str(apps_dir)), file=sys.stderr)
        return 2
    raise_open_file_limit()
    config = ServeConfig(
        apps_dir=apps_dir,
        settings=settings,
        database=database,
        limits=RunLimits(max_run_seconds=distributed.time_limit),
        distributed=distributed,
        locale=locale,
        durability=durability,
        durability_ms=durability_ms,
    )
    launcher = open_resources(config, apps)
    celery, runtime = build_worker(apps, launcher, distributed, locale)
    metrics_server = None
    if metrics_address is not None:
        metrics_server = start_metrics_server(*metrics_address)
        metrics.watch_queue_depth(queue_depth(distributed))

    def ready(**_: Any) -> None:
        print(
            t(
                "serve.worker.ready",
                locale,
                id=runtime.worker_id,
                count=len(apps.apps),
                queue=distributed.queue,
                concurrency=concurrency,
            ),
            flush=True,
        )

    worker_ready.connect(ready, weak=False)
    gc.freeze()
    runtime.start_background()
    try:
        with warnings.catch_warnings():
            # As root, Celery warns to use its `--uid` option, which `firstgate worker`
            # does not take. Its reason is pickle (root plus pickle is refused, not
            # warned about); this worker accepts JSON only (celery_app.py).
            warnings.filterwarnings("ignore", message=ROOT_WARNING, category=SecurityWarning)
            worker = celery.Worker(
                pool="gevent",
                concurrency=concurrency,
                hostname=f"firstgate@{runtime.worker_id}",
                queues=[distributed.queue],
                without_heartbeat=True,
                without_mingle=True,
                without_gossip=True,
                loglevel="WARNING",
                quiet=True,
            )
        worker.start()
        return int(worker.exitcode or 0)
    finally:
        if metrics_server is not None:
            metrics_server.stop(timeout=1.0)
        runtime.stop_background()
        launcher.close()
