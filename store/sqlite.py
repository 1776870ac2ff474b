"""The SQLite store: one file (or `:memory:`), WAL mode, numbered migrations.

The logic is `store.relational`'s; this module is the dialect: one shared
connection behind a lock, and `BEGIN IMMEDIATE` transactions (SQLite's write
lock, taken at BEGIN, is the lease lock too, across processes).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from store.base import StoreError
from store.relational import Database, RelationalStore, statements

MIGRATIONS: tuple[str, ...] = (
    # 1: conversations, their variables and messages; runs and node executions; files; leases.
    """
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        app_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        mode TEXT NOT NULL,
        dialogue_count INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE conversation_variables (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        value_type TEXT NOT NULL,
        value TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (conversation_id, name)
    );
    CREATE TABLE workflow_runs (
        id TEXT PRIMARY KEY,
        app_id TEXT NOT NULL,
        workflow_id TEXT NOT NULL,
        mode TEXT NOT NULL,
        user_id TEXT NOT NULL,
        conversation_id TEXT REFERENCES conversations(id) ON DELETE CASCADE,
        status TEXT NOT NULL,
        inputs TEXT NOT NULL,
        outputs TEXT NOT NULL,
        error TEXT,
        elapsed_time REAL NOT NULL,
        total_tokens INTEGER NOT NULL,
        total_steps INTEGER NOT NULL,
        exceptions_count INTEGER NOT NULL,
        created_at REAL NOT NULL,
        finished_at REAL NOT NULL
    );
    CREATE TABLE node_executions (
        id TEXT PRIMARY KEY,
        workflow_run_id TEXT NOT NULL REFERENCES workflow_runs(id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        node_id TEXT NOT NULL,
        node_type TEXT NOT NULL,
        title TEXT NOT NULL,
        predecessor_node_id TEXT,
        status TEXT NOT NULL,
        inputs TEXT NOT NULL,
        process_data TEXT NOT NULL,
        outputs TEXT NOT NULL,
        error TEXT,
        elapsed_time REAL NOT NULL,
        execution_metadata TEXT NOT NULL,
        created_at REAL NOT NULL,
        finished_at REAL NOT NULL
    );
    CREATE INDEX node_executions_run ON node_executions(workflow_run_id, idx);
    CREATE TABLE messages (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        workflow_run_id TEXT NOT NULL REFERENCES workflow_runs(id),
        query TEXT NOT NULL,
        answer TEXT NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        total_tokens INTEGER NOT NULL,
        created_at REAL NOT NULL,
        UNIQUE (conversation_id, seq)
    );
    CREATE TABLE files (
        id TEXT NOT NULL,
        workflow_run_id TEXT NOT NULL REFERENCES workflow_runs(id) ON DELETE CASCADE,
        variable TEXT NOT NULL,
        belongs_to TEXT NOT NULL,
        filename TEXT NOT NULL,
        extension TEXT NOT NULL,
        mime_type TEXT NOT NULL,
        size INTEGER NOT NULL,
        transfer_method TEXT NOT NULL,
        remote_url TEXT,
        path TEXT,
        PRIMARY KEY (workflow_run_id, id)
    );
    CREATE TABLE conversation_leases (
        conversation_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at REAL NOT NULL
    );
    """,
    # 2: what the Service API lists and serves: conversation names and inputs; uploads.
    """
    ALTER TABLE conversations ADD COLUMN name TEXT NOT NULL DEFAULT '';
    ALTER TABLE conversations ADD COLUMN inputs TEXT NOT NULL DEFAULT '{}';
    CREATE INDEX conversations_owner ON conversations(app_id, user_id, updated_at);
    CREATE TABLE uploads (
        id TEXT PRIMARY KEY,
        app_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        name TEXT NOT NULL,
        size INTEGER NOT NULL,
        extension TEXT NOT NULL,
        mime_type TEXT NOT NULL,
        path TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    """,
)


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
            self._db.execute("PRAGMA journal_mode = WAL")
            # WAL's NORMAL: a commit is atomic and survives a crash of the process;
            # only a power cut may lose the last commits (no fsync per commit,
            # which would sit in every run's end, a stop's included).
            self._db.execute("PRAGMA synchronous = NORMAL")

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
            super().__init__(_SQLiteDatabase(self.path), migrations, self.path)
        except sqlite3.DatabaseError as exc:
            raise StoreError("errors.store.unreadable", path=self.path, detail=str(exc)) from None
        except OSError as exc:
            raise StoreError(
                "errors.store.unreadable", path=self.path, detail=str(exc.strerror or exc)
            ) from None


def default_path() -> Path:
    """`$FIRSTGATE_STATE`, else `$XDG_DATA_HOME/firstgate/state.db` (~/.local/share)."""
    explicit = os.environ.get("FIRSTGATE_STATE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "firstgate" / "state.db"


def open_store(path: str | Path | None = None) -> SQLiteStore:
    return SQLiteStore(default_path() if path is None else path)
