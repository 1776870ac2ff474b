"""The SQLite store: one file (or `:memory:`), WAL mode, numbered migrations.

The logic is `store.relational`'s; this module is the dialect: one shared
connection behind a lock, and `BEGIN IMMEDIATE` transactions (SQLite's write
lock, taken at BEGIN, is the lease lock too, across processes).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from firstgate.store.base import StoreError
from firstgate.store.relational import Database, RelationalStore, statements
from firstgate.store.run_journal import RunJournal
from firstgate.store.schema import migrations

MIGRATIONS: tuple[str, ...] = migrations(real="REAL", integer="INTEGER")


WAL_CHECKPOINT_PAGES = 10_000


class _SQLiteDatabase(Database):
    def __init__(self, path: str) -> None:
        self._lock = threading.RLock()
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(
            path, timeout=30.0, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA foreign_keys = ON")
        if path != ":memory:":
            _enable_wal(self._db)
            # WAL's NORMAL: a commit is atomic and survives a crash of the process;
            # only a power cut may lose the last commits (no fsync per commit,
            # which would sit in every run's end, a stop's included).
            self._db.execute("PRAGMA synchronous = NORMAL")
            # The WAL is copied back into the database (and synced) when it holds
            # this many pages (SQLite's default: 1,000, 4 MB). A durable run commits
            # at every node and rewrites the same few pages each time; copying them
            # back ten times less often took a per-node run from 2.2x to 1.65x the
            # CPU of a run recorded at its end. The WAL may grow to about 40 MB.
            self._db.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")

    @contextmanager
    def transaction(self, *, leases: bool = False) -> Iterator[_Tx]:
        # Every write takes SQLite's one write lock at BEGIN, leases or not.
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield _Tx(self._db)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[_Tx]:
        with self._lock:
            yield _Tx(self._db)

    def run_script(self, tx: Any, script: str) -> None:
        for statement in statements(script):
            tx.execute(statement)

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _enable_wal(db: sqlite3.Connection, wait_s: float = 30.0) -> None:
    """Switch a database to WAL. The switch needs the database to itself, and
    SQLite answers "locked" at once (no busy wait) while another connection
    opening the same new file holds it: wait for it as a busy timeout would."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


class _Tx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._db.execute(sql, tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._db.executemany(sql, rows)


class SQLiteStore(RelationalStore):
    def __init__(self, path: str | Path, migrations: Sequence[str] = MIGRATIONS) -> None:
        self.path = str(path)
        try:
            super().__init__(
                _SQLiteDatabase(self.path), migrations, self.path, journal=_journal(self.path)
            )
        except sqlite3.DatabaseError as exc:
            raise StoreError("errors.store.unreadable", path=self.path, detail=str(exc)) from None
        except OSError as exc:
            raise StoreError(
                "errors.store.unreadable", path=self.path, detail=str(exc.strerror or exc)
            ) from None


def _journal(path: str) -> RunJournal | None:
    """A file database's run journals live next to it (a database in memory has none:
    nothing of it outlives the process anyway)."""
    if path == ":memory:" or path.startswith("file:"):
        return None
    return RunJournal(Path(f"{path}-journals"))


def default_path() -> Path:
    """`$FIRSTGATE_STATE`, else `$XDG_DATA_HOME/firstgate/state.db` (~/.local/share)."""
    explicit = os.environ.get("FIRSTGATE_STATE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "firstgate" / "state.db"


def open_store(path: str | Path | None = None) -> SQLiteStore:
    return SQLiteStore(default_path() if path is None else path)
