"""gunicorn settings for `serve.wsgi`: one gevent worker (runs live in the process
that started them), or `FIRSTGATE_HTTP_WORKERS` of them when runs execute on Celery
workers (`FIRSTGATE_BROKER`); a drain on SIGTERM.

gunicorn's graceful timeout waits for open requests; runs whose client has
gone are not requests any more, so `worker_exit` drains them the way the
embedded server does (finish within the grace period, then stop and record)."""

import os

from firstgate.serve.server import DEFAULT_GRACE_S, raise_open_file_limit

worker_class = "gevent"
workers = (
    int(os.environ.get("FIRSTGATE_HTTP_WORKERS", "1")) if os.environ.get("FIRSTGATE_BROKER") else 1
)
worker_connections = 4096
bind = os.environ.get("FIRSTGATE_BIND", "127.0.0.1:5001")
graceful_timeout = int(float(os.environ.get("FIRSTGATE_GRACE", DEFAULT_GRACE_S))) + 5
timeout = 0  # streams are long; the runs' own limits end them


def post_worker_init(worker):  # type: ignore[no-untyped-def]
    raise_open_file_limit()


def worker_exit(server, worker):  # type: ignore[no-untyped-def]
    from firstgate.locales import t
    from firstgate.serve import wsgi

    if wsgi.SERVICE is not None:
        grace = float(os.environ.get("FIRSTGATE_GRACE", DEFAULT_GRACE_S))
        wsgi.SERVICE.context.runs.drain(grace, t("serve.stoppedByShutdown"))
        wsgi.SERVICE.close()
