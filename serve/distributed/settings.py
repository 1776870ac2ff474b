"""The settings of the distributed mode, shared by `serve --broker` and `worker`
(both must be given the same values), and the one Redis client every part uses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis
from firstgate.common.redaction import redact_url
from firstgate.locales.localized_error import LocalizedError
from firstgate.store.postgres import is_postgres_url
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

# Dify's WORKFLOW_MAX_EXECUTION_TIME: a run's wall-clock limit on a worker.
DEFAULT_TIME_LIMIT_S = 1200.0
# A message taken by a worker that neither finished nor acknowledged it is
# handed out again after this long (kombu's Redis transport).
DEFAULT_VISIBILITY_TIMEOUT_S = 3600.0
# A worker renews its hold on each of its runs a few times per lease; a run
# whose lease lapses is lost (its worker died or hung).
DEFAULT_LEASE_S = 30.0
# How long a finished run's events stay readable (as in-process serve keeps them).
DEFAULT_KEEP_FINISHED_S = 300.0
# What Redis may be down for (a restart) before an operation gives up.
RECONNECT_FOR_S = 60.0
# Tries at start-up (about 5 s) before Redis counts as unreachable.
STARTUP_RETRIES = 12
# Connections to Redis per process (serve's route pools hold 4096 too); Redis'
# own `maxclients` (10,000 by default) must cover every process's.
MAX_REDIS_CONNECTIONS = 4096


class DistributedError(LocalizedError):
    """A distributed-mode setting that cannot work (the CLI exits 2 with it)."""


@dataclass(frozen=True, slots=True)
class DistributedSettings:
    broker: str  # redis://host:port/db
    queue: str = "firstgate"
    time_limit: float = DEFAULT_TIME_LIMIT_S
    visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT_S
    lease: float = DEFAULT_LEASE_S
    # How many times a run is started in all when its worker is lost: 1 never
    # re-runs it (it ends `failed`); 2 re-runs it once; and so on.
    max_attempts: int = 1
    keep_finished: float = DEFAULT_KEEP_FINISHED_S

    def __post_init__(self) -> None:
        scheme = urlsplit(self.broker).scheme
        if scheme not in ("redis", "rediss"):
            raise DistributedError("serve.worker.broker", url=redact_url(self.broker))
        if self.lease * 2 > self.visibility_timeout:
            # Lost runs are found by their lease, well before the broker hands
            # their message out again.
            raise DistributedError(
                "serve.worker.lease", lease=self.lease, visibility=self.visibility_timeout
            )
        if self.max_attempts < 1 or self.time_limit <= 0:
            raise DistributedError("serve.worker.attempts")

    @property
    def sweep_interval(self) -> float:
        return max(0.05, self.lease / 4)


def redis_client(url: str, *, socket_timeout: float = 30.0) -> redis.Redis:
    """A client that rides out a Redis restart: each command is retried on a lost
    connection for about `RECONNECT_FOR_S` (exponential back-off up to 0.5 s).
    Every stream a client follows holds a connection while it waits (`XREAD
    BLOCK`): the pool is as large as serve's connection pools, and a request
    beyond it waits for a free connection instead of failing."""
    retries = int(RECONNECT_FOR_S / 0.5) + 8
    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=MAX_REDIS_CONNECTIONS,
        timeout=RECONNECT_FOR_S,
        socket_timeout=socket_timeout,
        socket_connect_timeout=5.0,
        socket_keepalive=True,
        health_check_interval=15,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.02), retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError, ConnectionError],
    )
    client = redis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True
    return client


def reachable(client: redis.Redis, url: str) -> redis.Redis:
    """`client` once Redis answers at start-up; else a clear error (exit 2), not a
    traceback after a minute of retries. A Redis still starting gets a few seconds."""
    probe = redis.Redis.from_url(
        url,
        socket_connect_timeout=2.0,
        socket_timeout=5.0,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), STARTUP_RETRIES),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError, ConnectionError],
    )
    try:
        probe.ping()
    except (redis.RedisError, OSError) as exc:
        raise DistributedError(
            "serve.worker.unreachable", url=redact_url(url), error=str(exc)[:300]
        ) from None
    finally:
        probe.close()
    return client


def require_shared_store(database: str | None) -> str:
    """The store in this mode: PostgreSQL, which every process can share."""
    if not database or not is_postgres_url(database):
        raise DistributedError("serve.worker.sqlite")
    return database


def settings_from_env(environ: Mapping[str, str]) -> DistributedSettings | None:
    """The same settings for the production entry point (`serve.wsgi`):
    `FIRSTGATE_BROKER` (None without it), `FIRSTGATE_QUEUE`, `FIRSTGATE_TIME_LIMIT`,
    `FIRSTGATE_VISIBILITY_TIMEOUT`, `FIRSTGATE_LEASE`, `FIRSTGATE_MAX_ATTEMPTS`."""
    broker = environ.get("FIRSTGATE_BROKER")
    if not broker:
        return None
    return DistributedSettings(
        broker=broker,
        queue=environ.get("FIRSTGATE_QUEUE", "firstgate"),
        time_limit=float(environ.get("FIRSTGATE_TIME_LIMIT", DEFAULT_TIME_LIMIT_S)),
        visibility_timeout=float(
            environ.get("FIRSTGATE_VISIBILITY_TIMEOUT", DEFAULT_VISIBILITY_TIMEOUT_S)
        ),
        lease=float(environ.get("FIRSTGATE_LEASE", DEFAULT_LEASE_S)),
        max_attempts=int(environ.get("FIRSTGATE_MAX_ATTEMPTS", "1")),
    )


def queue_depth(settings: DistributedSettings) -> Callable[[], int | None]:
    """How many runs wait in the broker's queue (Celery's Redis transport keeps
    a queue as a list of its name), read at each scrape of `/metrics`."""
    client = redis_client(settings.broker, socket_timeout=2.0)

    def read() -> int | None:
        return int(client.llen(settings.queue))

    return read
