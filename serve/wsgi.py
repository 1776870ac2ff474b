"""The production entry point: the same application under gunicorn's gevent worker.

    FIRSTGATE_APPS_DIR=apps/ gunicorn -c python:firstgate.serve.gunicorn_conf 'firstgate.serve.wsgi:application()'

Settings come from the environment: `FIRSTGATE_APPS_DIR` (required),
`FIRSTGATE_MODELS` (the settings file), `FIRSTGATE_DATABASE_URL` or
`FIRSTGATE_STATE`, `FIRSTGATE_UPLOADS`, `FIRSTGATE_GRACE`, `FIRSTGATE_FILES_URL`,
`FIRSTGATE_ACCESS_LOG` (`off`: no line per request on stderr). One worker
process: runs and their stop requests live in the process that started them.
With `FIRSTGATE_BROKER` (and the other settings of `serve --broker`, see
`serve.distributed.settings.settings_from_env`) runs execute on `firstgate
worker` processes and `FIRSTGATE_HTTP_WORKERS` API processes may serve them.
"""

from __future__ import annotations

import os
from pathlib import Path

from firstgate.runtime.settings import load_settings
from firstgate.serve.access_log import AccessLog
from firstgate.serve.distributed.settings import require_shared_store, settings_from_env
from firstgate.serve.file_links import files_base_url
from firstgate.serve.server import DEFAULT_GRACE_S, ServeConfig, Service, build_service, report_apps
from firstgate.serve.webhooks import max_body

SERVICE: Service | None = None


def config_from_env() -> ServeConfig:
    models = os.environ.get("FIRSTGATE_MODELS")
    uploads = os.environ.get("FIRSTGATE_UPLOADS")
    database = os.environ.get("FIRSTGATE_DATABASE_URL") or os.environ.get("FIRSTGATE_STATE")
    distributed = settings_from_env(os.environ)
    if distributed is not None:
        database = require_shared_store(database)
    return ServeConfig(
        apps_dir=Path(os.environ["FIRSTGATE_APPS_DIR"]),
        settings=load_settings(models) if models else None,
        database=database,
        uploads_dir=Path(uploads) if uploads else None,
        grace=float(os.environ.get("FIRSTGATE_GRACE", DEFAULT_GRACE_S)),
        webhook_max_body=max_body(os.environ),
        distributed=distributed,
        files_url=files_base_url(
            os.environ.get("FIRSTGATE_FILES_URL"), *_bind(os.environ.get("FIRSTGATE_BIND", ""))
        ),
    )


def _bind(bind: str) -> tuple[str, int]:
    """gunicorn's `host:port` bind (default 127.0.0.1:5001, as `gunicorn_conf`)."""
    host, _, port = (bind or "127.0.0.1:5001").rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else 5001


def application():  # type: ignore[no-untyped-def]
    """Build the service once per worker process and return its WSGI callable."""
    global SERVICE
    if SERVICE is None:
        SERVICE = build_service(config_from_env(), os.environ)
        report_apps(SERVICE.context.apps, None)
        SERVICE.scheduler.start()
    if os.environ.get("FIRSTGATE_ACCESS_LOG", "").strip().lower() in ("off", "0", "false", "no"):
        return SERVICE.api
    return AccessLog(SERVICE.api)
