"""`/metrics` for a process that serves nothing else (a `firstgate worker`):
a gevent WSGI server on its own port answering Prometheus's scrape.

`firstgate serve` answers `/metrics` on its API port (`serve/api.py`); both
send `common/metrics.py:exposition()`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from firstgate.common import metrics

log = logging.getLogger("firstgate.metrics")


def metrics_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ.get("PATH_INFO") != "/metrics" or environ.get("REQUEST_METHOD") != "GET":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]
    body = metrics.exposition()
    start_response(
        "200 OK", [("Content-Type", metrics.CONTENT_TYPE), ("Content-Length", str(len(body)))]
    )
    return [body]


def start_metrics_server(host: str, port: int) -> Any:
    """Start answering `/metrics` on `host:port` (0: a free port); the caller
    stops the returned server. Turns recording on."""
    from gevent.pywsgi import WSGIServer

    metrics.enable()
    server = WSGIServer((host, port), metrics_app, log=None, error_log=log)
    server.start()
    return server
