"""The PostgreSQL store (`--database-url postgresql://...`).

The logic is `store.relational`'s; this module is the dialect. The driver is
pg8000, pure Python: its sockets are the standard library's, so under gevent
every query yields to other greenlets instead of blocking the process (a
libpq-based driver would block the hub for each round trip).

Connections come from a small pool; each transaction uses one connection from
BEGIN to COMMIT. Lease changes take `LOCK TABLE conversation_leases IN SHARE
ROW EXCLUSIVE MODE` at the start of their transaction: it serialises them
across every process using the database, and plain reads never wait for it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

from firstgate.common.redaction import redact_url
from firstgate.store.base import StoreError
from firstgate.store.relational import Database, RelationalStore, statements
from firstgate.store.schema import migrations

MIGRATIONS: tuple[str, ...] = migrations(real="DOUBLE PRECISION", integer="BIGINT")

DEFAULT_POOL = 8


def is_postgres_url(url: str) -> bool:
    return url.split(":", 1)[0] in ("postgres", "postgresql", "postgresql+pg8000")


def _connect_args(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    args: dict[str, Any] = {
        "user": unquote(parts.username or "postgres"),
        "host": parts.hostname or "localhost",
        "port": parts.port or 5432,
        "database": unquote(parts.path.lstrip("/")) or None,
    }
    if parts.password is not None:
        args["password"] = unquote(parts.password)
    return args


def _qmark(sql: str) -> str:
    # Our SQL has no `%` and no `?` inside literals: placeholders map one to one.
    return sql.replace("?", "%s")


class _Tx:
    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        self._cursor.execute(_qmark(sql), tuple(params))
        return self._cursor

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._cursor.executemany(_qmark(sql), [tuple(r) for r in rows])


class _PostgresDatabase(Database):
    def __init__(self, url: str, pool_size: int) -> None:
        import pg8000.dbapi  # imported here: SQLite users never need the driver

        self._driver = pg8000.dbapi
        self._args = _connect_args(url)
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(pool_size)
        self._closed = False
        self._release(self._open())  # fail now, not at the first request

    def _open(self) -> Any:
        connection = self._driver.connect(**self._args, timeout=30)
        connection.autocommit = True  # transactions are explicit BEGIN / COMMIT
        return connection

    def _release(self, connection: Any) -> None:
        self._idle.put(connection)

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        self._slots.acquire()
        try:
            try:
                connection = self._idle.get_nowait()
            except queue.Empty:
                connection = self._open()
            try:
                yield connection
            except self._driver.InterfaceError:
                # A broken connection is dropped, not returned to the pool.
                _close_quietly(connection)
                raise
            else:
                self._release(connection)
        finally:
            self._slots.release()

    @contextmanager
    def transaction(self, *, leases: bool = False) -> Iterator[_Tx]:
        with self._connection() as connection:
            cursor = connection.cursor()
            cursor.execute("BEGIN")
            try:
                if leases:
                    cursor.execute(
                        "LOCK TABLE conversation_leases IN SHARE ROW EXCLUSIVE MODE"
                        if self._has_leases(cursor)
                        else "SELECT pg_advisory_xact_lock(7011)"
                    )
                yield _Tx(cursor)
            except BaseException:
                with _suppress_driver_errors(self._driver):
                    cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT")

    @staticmethod
    def _has_leases(cursor: Any) -> bool:
        # Before migration 1 there is no lease table: an advisory lock serialises
        # the migrations themselves instead.
        cursor.execute("SELECT to_regclass('conversation_leases') IS NOT NULL")
        return bool(cursor.fetchone()[0])

    @contextmanager
    def read(self) -> Iterator[_Tx]:
        with self._connection() as connection:
            yield _Tx(connection.cursor())

    def run_script(self, tx: Any, script: str) -> None:
        for statement in statements(script):
            tx.execute(statement)

    def close(self) -> None:
        while True:
            try:
                _close_quietly(self._idle.get_nowait())
            except queue.Empty:
                return


def _close_quietly(connection: Any) -> None:
    try:
        connection.close()
    except Exception:  # noqa: BLE001 - closing a broken connection may fail; it is gone anyway
        pass


@contextmanager
def _suppress_driver_errors(driver: Any) -> Iterator[None]:
    try:
        yield
    except driver.Error:
        pass


class PostgresStore(RelationalStore):
    def __init__(
        self, url: str, migrations: Sequence[str] = MIGRATIONS, pool_size: int = DEFAULT_POOL
    ) -> None:
        self.url = redact_url(url)
        try:
            import pg8000.dbapi

            errors: tuple[type[BaseException], ...] = (pg8000.dbapi.Error, OSError)
        except ImportError as exc:  # pragma: no cover - a dependency of firstgate
            raise StoreError("errors.store.unreadable", path=self.url, detail=str(exc)) from None
        try:
            super().__init__(_PostgresDatabase(url, pool_size), migrations, self.url)
        except errors as exc:
            raise StoreError(
                "errors.store.unreadable", path=self.url, detail=_describe(exc)
            ) from None


def _describe(exc: BaseException) -> str:
    """The driver's complaint without anything of the URL's password."""
    if exc.args and isinstance(exc.args[0], dict):
        info = exc.args[0]  # pg8000 server errors: a dict of the fields
        return str(info.get("M") or info)
    return str(exc) or type(exc).__name__
