"""The `firstgate` command: `serve` and `worker` are handled here, everything else
by the runtime's CLI (`runtime/cli/command.py`).

`firstgate serve` runs under gevent, so the standard library is patched before
anything else is imported: this module imports nothing at the top that opens
sockets or starts threads.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def _patch_for_gevent() -> None:
    import contextlib

    # httpcore imports trio when it is installed; trio's epoll manager needs
    # select.epoll, which patching removes. Importing it first is harmless.
    with contextlib.suppress(ImportError):
        import trio  # noqa: F401
    from gevent import monkey

    monkey.patch_all()


def _serve_parser():  # type: ignore[no-untyped-def]
    import argparse

    parser = argparse.ArgumentParser(
        prog="firstgate serve",
        description="Serve Dify's Service API for every export in APPS_DIR, and the run console.",
    )
    parser.add_argument(
        "apps_dir", metavar="APPS_DIR", help="a folder of exports (.yml/.yaml), one app each"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)"
    )
    parser.add_argument(
        "--port", type=int, default=5001, help="the port to listen on (default: %(default)s)"
    )
    _add_settings_argument(parser)
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--state",
        metavar="DB",
        help="the SQLite state database (default: $FIRSTGATE_STATE, else "
        "~/.local/share/firstgate/state.db)",
    )
    where.add_argument(
        "--database-url", metavar="URL", help="a PostgreSQL database: postgresql://..."
    )
    parser.add_argument(
        "--uploads",
        metavar="DIR",
        help="where uploaded files are kept (default: uploads/ beside the SQLite database)",
    )
    parser.add_argument(
        "--files-url",
        metavar="URL",
        help="the address file links point to, as clients reach this server (Dify's FILES_URL;"
        " default: $FIRSTGATE_FILES_URL, else the address served on)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds runs in flight get to finish on SIGTERM before they are stopped "
        "(default: %(default)g)",
    )
    parser.add_argument(
        "--form-sweep-interval",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="how often human-input forms past their deadline are looked for; they are "
        "also looked for at start-up (default: %(default)g)",
    )
    parser.add_argument(
        "--no-access-log",
        dest="access_log",
        action="store_false",
        help="write no line per request on stderr (default: one per request)",
    )
    parser.add_argument("--locale", help="language of messages (default: from LANG)")
    _add_durability_arguments(parser)
    _add_connection_arguments(parser)
    _add_broker_arguments(parser, required=False)
    return parser


def _files_url(url: str | None) -> str | None:
    """A configured files URL, checked before anything starts."""
    from firstgate.common.redaction import redact_url
    from firstgate.locales.localized_error import LocalizedError
    from firstgate.serve.file_links import FilesUrlError, files_base_url

    if not url:
        return None
    try:
        return files_base_url(url, "", 0)
    except FilesUrlError:
        raise LocalizedError("serve.start.badFilesUrl", url=redact_url(url)) from None


def _at_least_one(text: str) -> int:
    import argparse

    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return number


def _positive_seconds(text: str) -> float:
    import argparse
    import math

    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return seconds


def _add_connection_arguments(parser) -> None:  # type: ignore[no-untyped-def]
    from firstgate.serve import connection_limits as defaults

    group = parser.add_argument_group("client connections")
    group.add_argument(
        "--max-connections",
        type=_at_least_one,
        default=defaults.DEFAULT_MAX_CONNECTIONS,
        help="open client connections at once; more wait to be accepted (default: %(default)s)",
    )
    group.add_argument(
        "--header-timeout",
        type=_positive_seconds,
        default=defaults.DEFAULT_HEADER_S,
        help="seconds a request's line and headers may take to arrive (default: %(default)s)",
    )
    group.add_argument(
        "--keepalive-timeout",
        type=_positive_seconds,
        default=defaults.DEFAULT_IDLE_S,
        help="seconds a connection may stay silent before its next request (default: %(default)s)",
    )


def _add_broker_arguments(parser, *, required: bool) -> None:  # type: ignore[no-untyped-def]
    """The distributed mode's settings: `serve --broker` and `worker` take the same ones."""
    from firstgate.serve.distributed import settings as defaults

    group = parser.add_argument_group("runs on Celery workers (give serve and worker the same)")
    group.add_argument(
        "--broker",
        metavar="redis://HOST:PORT/DB",
        required=required,
        help="queue runs here for `firstgate worker` processes; events and stops go through it",
    )
    group.add_argument(
        "--queue", default="firstgate", help="the Celery queue's name (default: %(default)s)"
    )
    group.add_argument(
        "--time-limit",
        type=float,
        default=defaults.DEFAULT_TIME_LIMIT_S,
        metavar="SECONDS",
        help="seconds a run may take on a worker before it is ended as failed "
        "(default: %(default)g)",
    )
    group.add_argument(
        "--visibility-timeout",
        type=float,
        default=defaults.DEFAULT_VISIBILITY_TIMEOUT_S,
        metavar="SECONDS",
        help="seconds before the broker hands a taken, unacknowledged message out again "
        "(default: %(default)g)",
    )
    group.add_argument(
        "--lease",
        type=float,
        default=defaults.DEFAULT_LEASE_S,
        metavar="SECONDS",
        help="seconds without a heartbeat after which a worker's run counts as lost "
        "(default: %(default)g)",
    )
    group.add_argument(
        "--max-attempts",
        type=int,
        default=1,
        metavar="N",
        help="times a run is started in all when its worker is lost (1, the default: never re-run)",
    )


def _add_durability_arguments(parser) -> None:  # type: ignore[no-untyped-def]
    from firstgate.runtime.execution.checkpoint import DEFAULT_BATCH_MS, Durability

    parser.add_argument(
        "--durability",
        choices=[d.value for d in Durability],
        default=Durability.BATCHED.value,
        help="when a run's state reaches the store: after every node, batched (the default), "
        "or at the end only; a run resumes after a crash from its last checkpoint",
    )
    parser.add_argument(
        "--durability-ms",
        type=int,
        default=DEFAULT_BATCH_MS,
        metavar="MS",
        help="batched durability: at most one commit a run every MS (default: %(default)s)",
    )


def _add_settings_argument(parser) -> None:  # type: ignore[no-untyped-def]
    parser.add_argument(
        "--models",
        "--settings",
        metavar="SETTINGS.yaml",
        help="the runtime settings file (default: every model on the embedded llama-server)",
    )


def _distributed(args):  # type: ignore[no-untyped-def]
    from firstgate.serve.distributed.settings import DistributedSettings

    if not args.broker:
        return None
    return DistributedSettings(
        broker=args.broker,
        queue=args.queue,
        time_limit=args.time_limit,
        visibility_timeout=args.visibility_timeout,
        lease=args.lease,
        max_attempts=args.max_attempts,
    )


def _locale_and_apps(args):  # type: ignore[no-untyped-def]
    """The messages' locale, and the apps directory (None, said why, when it is not one)."""
    from pathlib import Path

    from firstgate import locales

    locale = locales.normalize_locale(args.locale) if args.locale else locales.locale_from_env()
    apps_dir = Path(args.apps_dir)
    if not apps_dir.is_dir():
        print(locales.t("serve.start.notADirectory", locale, dir=str(apps_dir)), file=sys.stderr)
        return locale, None
    return locale, apps_dir


def _settings(args):  # type: ignore[no-untyped-def]
    from firstgate.runtime.settings import load_settings

    return load_settings(args.models) if args.models else None


def serve_main(argv: Sequence[str]) -> int:
    _patch_for_gevent()
    import os
    from pathlib import Path

    from firstgate.locales.localized_error import LocalizedError
    from firstgate.runtime.execution.checkpoint import Durability
    from firstgate.serve.connection_limits import ConnectionLimits
    from firstgate.serve.distributed.settings import require_shared_store
    from firstgate.serve.server import ServeConfig, serve_forever
    from firstgate.serve.webhooks import max_body

    args = _serve_parser().parse_args(list(argv))
    locale, apps_dir = _locale_and_apps(args)
    if apps_dir is None:
        return 2
    try:
        settings = _settings(args)
        distributed = _distributed(args)
        database = args.database_url or args.state
        if distributed is not None:
            database = require_shared_store(database)
        config = ServeConfig(
            apps_dir=apps_dir,
            host=args.host,
            port=args.port,
            settings=settings,
            database=database,
            uploads_dir=Path(args.uploads) if args.uploads else None,
            grace=args.grace,
            locale=locale,
            # Seconds of silence before a `ping` event (Dify's 10); tests shorten it.
            ping_interval=float(os.environ.get("FIRSTGATE_SSE_PING_S", "10")),
            webhook_max_body=max_body(os.environ),
            distributed=distributed,
            files_url=_files_url(args.files_url or os.environ.get("FIRSTGATE_FILES_URL")),
            connections=ConnectionLimits(
                idle_s=args.keepalive_timeout,
                header_s=args.header_timeout,
                max_connections=args.max_connections,
            ),
            access_log=args.access_log,
            form_sweep_s=args.form_sweep_interval,
            durability=Durability(args.durability),
            durability_ms=args.durability_ms,
        )
        return serve_forever(config)
    except LocalizedError as exc:
        print(exc.render(locale), file=sys.stderr)
        return 2


def _worker_parser():  # type: ignore[no-untyped-def]
    import argparse

    parser = argparse.ArgumentParser(
        prog="firstgate worker",
        description="Run the workflows that `firstgate serve --broker` queues (a Celery worker).",
    )
    parser.add_argument(
        "apps_dir", metavar="APPS_DIR", help="the same folder of exports serve is given"
    )
    _add_settings_argument(parser)
    parser.add_argument(
        "--database-url", metavar="URL", help="the PostgreSQL database serve uses: postgresql://..."
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=1000,
        metavar="N",
        help="runs at a time in this process, as greenlets (default: %(default)s)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="answer Prometheus's scrape at http://HOST:PORT/metrics (default: off)",
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address --metrics-port listens on (default: %(default)s)",
    )
    parser.add_argument("--locale", help="language of messages (default: from LANG)")
    _add_durability_arguments(parser)
    _add_broker_arguments(parser, required=True)
    return parser


def worker_main(argv: Sequence[str]) -> int:
    _patch_for_gevent()
    from firstgate.locales.localized_error import LocalizedError
    from firstgate.runtime.execution.checkpoint import Durability
    from firstgate.serve.distributed.run_worker import run_worker
    from firstgate.serve.distributed.settings import require_shared_store

    args = _worker_parser().parse_args(list(argv))
    locale, apps_dir = _locale_and_apps(args)
    if apps_dir is None:
        return 2
    try:
        settings = _settings(args)
        distributed = _distributed(args)
        database = require_shared_store(args.database_url)
        return run_worker(
            apps_dir,
            distributed,
            database=database,
            settings=settings,
            concurrency=args.concurrency,
            locale=locale,
            durability=Durability(args.durability),
            durability_ms=args.durability_ms,
            metrics_address=None
            if args.metrics_port is None
            else (args.metrics_host, args.metrics_port),
        )
    except LocalizedError as exc:
        print(exc.render(locale), file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["serve"]:
        return serve_main(args[1:])
    if args[:1] == ["worker"]:
        return worker_main(args[1:])
    from firstgate.runtime.cli.command import main as runtime_main

    return runtime_main(args, more_commands=MORE_COMMANDS)


# Listed by `firstgate --help` after the runtime's own commands.
MORE_COMMANDS = (
    ("serve", "serve Dify's Service API and the run console for a folder of exports"),
    ("worker", "a Celery worker: runs the workflows `firstgate serve --broker` queues"),
)


if __name__ == "__main__":
    sys.exit(main())
