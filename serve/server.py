"""`firstgate serve`: the Service API on gevent's WSGI server, in this process.

Why gevent's server: firstgate's runtime is gevent-first (every socket wait
is a greenlet switch, the gate's deadlines and cancels work per greenlet), and
a streaming run is mostly waiting on two sockets, the model server's and the
client's. gevent's `pywsgi` is the server that gunicorn's gevent worker runs
(Dify's own deployment: Flask on gunicorn with gevent workers), so a slow
stream costs a greenlet, not a thread, and the same code runs embedded here or
under gunicorn (`serve/wsgi.py`, the production command in the README).

SIGTERM (and SIGINT) drain: the listening socket closes at once, runs in
flight get `--grace` seconds to finish, then they are stopped (recorded as
`stopped` with the output they had) and the process exits; child processes
(the embedded llama-server, code sandboxes) are closed on the way out.
"""

from __future__ import annotations

import gc
import logging
import os
import resource
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from firstgate.common import metrics
from firstgate.locales import t
from firstgate.runtime.execution.checkpoint import DEFAULT_BATCH_MS, Durability
from firstgate.runtime.execution.limits import RunLimits
from firstgate.runtime.execution.resources import RunResources
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.workflow import load_workflow
from firstgate.serve.access_log import AccessLog
from firstgate.serve.api import PING_INTERVAL_S, ServeContext, ServiceApi
from firstgate.serve.apps import AppDirectory, load_directory
from firstgate.serve.connection_limits import ConnectionLimits
from firstgate.serve.distributed.settings import DistributedSettings, queue_depth
from firstgate.serve.file_links import FileLinks, files_base_url
from firstgate.serve.form_deadlines import DEFAULT_INTERVAL_S as DEFAULT_FORM_SWEEP_S
from firstgate.serve.form_deadlines import FormDeadlines
from firstgate.serve.human_input import end_paused
from firstgate.serve.launch import Launcher
from firstgate.serve.runs import RunManager, Runs
from firstgate.serve.schedules import Scheduler, schedules
from firstgate.serve.webhooks import DEFAULT_MAX_BODY, webhooks
from firstgate.store import open_store
from firstgate.store.base import Store
from firstgate.store.sqlite import default_path

log = logging.getLogger("firstgate.serve")

DEFAULT_PORT = 5001  # Dify's API port
DEFAULT_GRACE_S = 30.0
# Simultaneous streams per model route: one connection each (a stream holds it).
MAX_ROUTE_CONNECTIONS = 4096


@dataclass(frozen=True, slots=True)
class ServeConfig:
    apps_dir: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    settings: RuntimeSettings | None = None
    database: str | None = None  # a PostgreSQL URL or a SQLite path; None: the default file
    uploads_dir: Path | None = None
    grace: float = DEFAULT_GRACE_S
    locale: str | None = None
    ping_interval: float = PING_INTERVAL_S
    limits: RunLimits | None = None  # None: the engine's defaults
    # Runs on Celery workers (`--broker`); None: in this process.
    distributed: DistributedSettings | None = None
    connections: ConnectionLimits = ConnectionLimits()
    # Where file links point (Dify's FILES_URL); None: the address served on.
    files_url: str | None = None
    access_log: bool = True  # a line per request on stderr (serve/access_log.py)
    # How often forms past their deadline are looked for (serve/form_deadlines.py).
    form_sweep_s: float = DEFAULT_FORM_SWEEP_S
    # Dify's WEBHOOK_REQUEST_BODY_MAX_SIZE: the most a webhook call's body may carry.
    webhook_max_body: int = DEFAULT_MAX_BODY
    # When runs' state reaches the store (`--durability`, `--durability-ms`).
    durability: Durability = Durability.BATCHED
    durability_ms: int = DEFAULT_BATCH_MS


def raise_open_file_limit() -> None:
    """Each stream holds two sockets: take the hard limit on open files."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass


def open_resources(
    config: ServeConfig, apps: AppDirectory, *, executes_runs: bool = True
) -> Launcher:
    """What the runs of this process share, opened once: the store, and the run
    resources (one pool of connections and one embedded llama-server, one pool of
    code sandboxes started on first use); `Launcher.close()` closes them. A
    process that only queues runs (`serve --broker`) starts no server."""
    store: Store = open_store(config.database)
    resources = RunResources.open(
        config.settings,
        store=store,
        loader=load_workflow,
        max_connections=MAX_ROUTE_CONNECTIONS,
    )
    launcher = Launcher(
        resources, FileLinks(), config.limits, config.durability, config.durability_ms
    )
    try:
        if executes_runs:
            providers = {p for app in apps.apps.values() for p in app.workflow.llm_providers()}
            resources.start_local(providers)
    except BaseException:
        launcher.close()
        raise
    return launcher


@dataclass(slots=True)
class Service:
    """Everything one serving process holds; `close()` lets it all go."""

    context: ServeContext
    api: ServiceApi
    launcher: Launcher
    scheduler: Scheduler

    def close(self) -> None:
        self.scheduler.stop()
        self.context.runs.close()
        self.launcher.close()


def build_service(
    config: ServeConfig, environ: Mapping[str, str], directory: AppDirectory | None = None
) -> Service:
    apps = (
        directory
        if directory is not None
        else load_directory(config.apps_dir, environ, config.settings)
    )
    uploads_dir = config.uploads_dir or _default_uploads(config.database)
    uploads_dir.mkdir(parents=True, exist_ok=True)
    distributed = config.distributed
    metrics.enable()  # a serving process answers /metrics
    launcher = open_resources(config, apps, executes_runs=distributed is None)
    try:
        if distributed is None:
            manager = RunManager(launcher, end_paused=end_paused)
            # Runs the last server was running when it stopped go on from their checkpoints.
            manager.resume_interrupted(apps.apps)
            runs: Runs = manager
        else:
            from firstgate.serve.distributed.remote_runs import connect

            runs = connect(launcher, distributed)
            metrics.watch_queue_depth(queue_depth(distributed))
        context = ServeContext(
            apps=apps,
            store=launcher.store,
            runs=runs,
            uploads_dir=uploads_dir,
            settings=config.settings,
            clients=launcher.resources.clients if distributed is None else None,
            ping_interval=config.ping_interval,
            links=launcher.links,
            files_url=config.files_url or "",
            hooks=webhooks(apps),
            webhook_max_body=config.webhook_max_body,
        )
        scheduler = Scheduler(schedules(apps), runs, base_url=lambda: context.files_url)
    except BaseException:
        launcher.close()
        raise
    return Service(context, ServiceApi(context), launcher, scheduler)


def _default_uploads(database: str | None) -> Path:
    if database and "://" not in database:
        return Path(database).expanduser().resolve().parent / "uploads"
    return default_path().parent / "uploads"


def report_apps(apps: AppDirectory, locale: str | None) -> None:
    for skipped in apps.skipped:
        print(
            t("serve.start.skipped", locale, file=skipped.path.name)
            + " "
            + t(skipped.message_key, locale, **skipped.params),
            file=sys.stderr,
        )
    for app in apps.apps.values():
        print(t("serve.start.app", locale, name=app.name, file=app.path.name, mode=app.mode))
    for hook in webhooks(apps).values():
        print(
            t("serve.start.webhook", locale, name=hook.app.name, node=hook.node.id, path=hook.path)
        )
    for plan in schedules(apps):
        where = {"cron": plan.text, "timezone": plan.zone.key}
        print(t("serve.start.schedule", locale, name=plan.app.name, node=plan.node.id, **where))


def serve_forever(config: ServeConfig, environ: Mapping[str, str] | None = None) -> int:
    import gevent
    import gevent.event
    from gevent.pywsgi import WSGIServer

    environ = os.environ if environ is None else environ
    apps = load_directory(config.apps_dir, environ, config.settings)
    report_apps(apps, config.locale)
    if not apps.apps:
        print(t("serve.start.noApps", config.locale, dir=str(config.apps_dir)), file=sys.stderr)
        return 2
    raise_open_file_limit()
    service = build_service(config, environ, apps)
    # What start-up built (workflows, settings, clients) lives as long as the
    # process: out of the collector's way, so its full passes stay short.
    gc.freeze()
    application = AccessLog(service.api) if config.access_log else service.api
    server = WSGIServer(
        (config.host, config.port),
        application,
        log=None,
        error_log=log,
        backlog=2048,
        handler_class=config.connections.handler(),
        spawn=config.connections.pool(),
    )
    server.start()
    host, port = server.address[:2]
    service.context.files_url = files_base_url(config.files_url, config.host, port)
    print(t("serve.start.listening", config.locale, url=f"http://{host}:{port}/"), flush=True)
    service.scheduler.start()
    stopping = gevent.event.Event()

    def on_signal() -> None:
        stopping.set()

    for number in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(number, on_signal)
    deadlines = FormDeadlines(
        service.context.store, service.context.runs, apps, config.form_sweep_s
    )
    try:
        deadlines.start()
        stopping.wait()
        deadlines.stop()
        print(t("serve.stop.draining", config.locale, grace=config.grace), flush=True)
        service.scheduler.stop()  # no tick starts a run while the others drain
        server.close()  # stop accepting; open connections go on
        service.context.runs.drain(config.grace, t("serve.stoppedByShutdown", config.locale))
        server.stop(timeout=2.0)
    finally:
        service.close()
    print(t("serve.stop.done", config.locale), flush=True)
    return 0
