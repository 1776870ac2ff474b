"""The SQLite store: one file (or `:memory:`), WAL mode, numbered migrations.

Migration story: `schema_version` holds how many entries of `MIGRATIONS`
have been applied. Opening a database applies the missing ones in order,
each in its own transaction, so a database from any older build is brought
up to date and one from a newer build (a version this build does not know)
is refused instead of being half understood. Migrations only ever append.

Conversation leases: a turn inserts a row in `conversation_leases` inside an
IMMEDIATE transaction (SQLite's write lock makes check-and-insert atomic
across processes). A lease ends when the turn commits or releases it, when it
expires, or when the process that holds it is gone (same host, pid not
running), so a crash never leaves a conversation stuck.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from store.base import (
    MESSAGE_NORMAL,
    FileRecord,
    HistoryTurn,
    MessageRecord,
    NodeExecutionRecord,
    RunRecord,
    Store,
    StoreError,
    Turn,
    TurnResult,
    TurnState,
    VariableValue,
)

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
)

_POLL_S = 0.05  # how often a waiting turn looks at a held lease


def _dump(value: Any) -> str:
    # Values arrive as plain data (the runtime serialises files before they get here).
    return json.dumps(value, ensure_ascii=False, default=str)


def _load(text: str | None) -> Any:
    return json.loads(text) if text else None


def _owner_token() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"


def _owner_gone(owner: str) -> bool:
    """Whether the lease's process is known to be gone (only decidable on this host)."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # exists, owned by someone else
    return False


class SQLiteStore(Store):
    def __init__(self, path: str | Path, migrations: Sequence[str] = MIGRATIONS) -> None:
        self.path = str(path)
        self._lock = threading.RLock()
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.path, timeout=30.0, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA foreign_keys = ON")
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode = WAL")
            self._migrate(migrations)
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                "errors.store.unreadable",
                path=self.path,
                detail=str(exc),
            ) from None
        except OSError as exc:
            raise StoreError(
                "errors.store.unreadable",
                path=self.path,
                detail=str(exc.strerror or exc),
            ) from None

    # ---- schema

    def schema_version(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT version FROM schema_version").fetchone()
        return int(row[0]) if row else 0

    def _migrate(self, migrations: Sequence[str]) -> None:
        with self._transaction():
            self._db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = self._db.execute("SELECT version FROM schema_version").fetchone()
            if row is None:
                self._db.execute("INSERT INTO schema_version (version) VALUES (0)")
        current = self.schema_version()
        if current > len(migrations):
            raise StoreError(
                "errors.store.newerSchema",
                path=self.path,
                found=current,
                known=len(migrations),
            )
        for version in range(current + 1, len(migrations) + 1):
            with self._transaction() as db:
                # Another process may have applied it since we looked: the write
                # lock is ours now, so this second look is the one that counts.
                (applied,) = db.execute("SELECT version FROM schema_version").fetchone()
                if applied >= version:
                    continue
                for statement in _statements(migrations[version - 1]):
                    self._db.execute(statement)
                self._db.execute("UPDATE schema_version SET version = ?", (version,))

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: the write lock is taken at BEGIN, so a
        read-then-write inside it cannot interleave with another writer."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ---- turns

    def begin_turn(
        self,
        conversation_id: str,
        *,
        app_id: str,
        user_id: str,
        mode: str,
        lease_seconds: float,
        wait_seconds: float,
    ) -> Turn:
        owner = _owner_token()
        give_up = time.monotonic() + max(0.0, wait_seconds)
        while True:
            with self._transaction() as db:
                row = db.execute(
                    "SELECT app_id, user_id FROM conversations WHERE id = ?", (conversation_id,)
                ).fetchone()
                if row is not None and (row[0] != app_id or row[1] != user_id):
                    raise StoreError(
                        "errors.store.foreignConversation",
                        conversation=conversation_id,
                    )
                if self._take_lease(db, conversation_id, owner, lease_seconds):
                    state = self._state(db, conversation_id, is_new=row is None)
                    return _SQLiteTurn(self, owner, app_id, user_id, mode, state)
            if time.monotonic() >= give_up:
                raise StoreError(
                    "errors.store.conversationBusy",
                    conversation=conversation_id,
                )
            time.sleep(_POLL_S)

    def _take_lease(
        self, db: sqlite3.Connection, conversation_id: str, owner: str, lease_seconds: float
    ) -> bool:
        now = time.time()
        held = db.execute(
            "SELECT owner, expires_at FROM conversation_leases WHERE conversation_id = ?",
            (conversation_id,),
        ).fetchone()
        if held is not None and held[1] > now and not _owner_gone(held[0]):
            return False
        db.execute(
            "INSERT OR REPLACE INTO conversation_leases (conversation_id, owner, expires_at) "
            "VALUES (?, ?, ?)",
            (conversation_id, owner, now + lease_seconds),
        )
        return True

    def _state(self, db: sqlite3.Connection, conversation_id: str, *, is_new: bool) -> TurnState:
        state = TurnState(conversation_id=conversation_id, is_new=is_new)
        if is_new:
            return state
        for name, value_type, value in db.execute(
            "SELECT name, value_type, value FROM conversation_variables WHERE conversation_id = ?",
            (conversation_id,),
        ):
            state.variables[name] = VariableValue(value_type, _load(value))
        state.history = [
            HistoryTurn(query, answer)
            for query, answer in db.execute(
                "SELECT query, answer FROM messages WHERE conversation_id = ? AND status = ? "
                "ORDER BY seq",
                (conversation_id, MESSAGE_NORMAL),
            )
        ]
        state.dialogue_count = len(state.history)
        return state

    def _release(self, conversation_id: str, owner: str) -> None:
        with self._transaction() as db:
            db.execute(
                "DELETE FROM conversation_leases WHERE conversation_id = ? AND owner = ?",
                (conversation_id, owner),
            )

    def _commit_turn(self, turn: _SQLiteTurn, result: TurnResult) -> None:
        state = turn.state
        message = result.message
        with self._transaction() as db:
            held = db.execute(
                "SELECT owner FROM conversation_leases WHERE conversation_id = ?",
                (state.conversation_id,),
            ).fetchone()
            if held is None or held[0] != turn.owner:
                # Our lease expired and another turn took the conversation: writing
                # now could undo what that turn wrote.
                raise StoreError(
                    "errors.store.leaseLost",
                    conversation=state.conversation_id,
                )
            now = time.time()
            normal = message.status == MESSAGE_NORMAL
            db.execute(
                "INSERT INTO conversations (id, app_id, user_id, mode, dialogue_count, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, 0, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET updated_at = excluded.updated_at",
                (state.conversation_id, turn.app_id, turn.user_id, turn.mode, now, now),
            )
            self._insert_run(db, result.run, state.conversation_id)
            seq = db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE conversation_id = ?",
                (state.conversation_id,),
            ).fetchone()[0]
            db.execute(
                "INSERT INTO messages (id, conversation_id, seq, workflow_run_id, query, answer, "
                "status, error, total_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    message.id,
                    state.conversation_id,
                    seq,
                    result.run.id,
                    message.query,
                    message.answer,
                    message.status,
                    message.error,
                    message.total_tokens,
                    message.created_at,
                ),
            )
            if normal:
                db.execute(
                    "UPDATE conversations SET dialogue_count = dialogue_count + 1 WHERE id = ?",
                    (state.conversation_id,),
                )
                for name, variable in result.variables.items():
                    db.execute(
                        "INSERT OR REPLACE INTO conversation_variables "
                        "(conversation_id, name, value_type, value, updated_at) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (
                            state.conversation_id,
                            name,
                            variable.value_type,
                            _dump(variable.value),
                            now,
                        ),
                    )
            db.execute(
                "DELETE FROM conversation_leases WHERE conversation_id = ? AND owner = ?",
                (state.conversation_id, turn.owner),
            )

    # ---- runs

    def record_run(self, run: RunRecord) -> None:
        with self._transaction() as db:
            self._insert_run(db, run, None)

    def _insert_run(
        self, db: sqlite3.Connection, run: RunRecord, conversation_id: str | None
    ) -> None:
        db.execute(
            "INSERT INTO workflow_runs (id, app_id, workflow_id, mode, user_id, conversation_id, "
            "status, inputs, outputs, error, elapsed_time, total_tokens, total_steps, "
            "exceptions_count, created_at, finished_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run.id,
                run.app_id,
                run.workflow_id,
                run.mode,
                run.user_id,
                conversation_id,
                run.status,
                _dump(run.inputs),
                _dump(run.outputs),
                run.error,
                run.elapsed_time,
                run.total_tokens,
                run.total_steps,
                run.exceptions_count,
                run.created_at,
                run.finished_at,
            ),
        )
        db.executemany(
            "INSERT INTO node_executions (id, workflow_run_id, idx, node_id, node_type, title, "
            "predecessor_node_id, status, inputs, process_data, outputs, error, elapsed_time, "
            "execution_metadata, created_at, finished_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [_node_row(run.id, node) for node in run.nodes],
        )
        db.executemany(
            "INSERT INTO files (id, workflow_run_id, variable, belongs_to, filename, extension, "
            "mime_type, size, transfer_method, remote_url, path) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [_file_row(run.id, file) for file in run.files],
        )

    def run(self, run_id: str) -> RunRecord | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, app_id, workflow_id, mode, user_id, status, inputs, outputs, error, "
                "elapsed_time, total_tokens, total_steps, exceptions_count, created_at, "
                "finished_at FROM workflow_runs WHERE id = ?",
                (run_id,),
            ).fetchone()
            if row is None:
                return None
            nodes = [
                NodeExecutionRecord(
                    id=n[0],
                    index=n[1],
                    node_id=n[2],
                    node_type=n[3],
                    title=n[4],
                    predecessor_node_id=n[5],
                    status=n[6],
                    inputs=_load(n[7]) or {},
                    process_data=_load(n[8]) or {},
                    outputs=_load(n[9]) or {},
                    error=n[10],
                    elapsed_time=n[11],
                    execution_metadata=_load(n[12]) or {},
                    created_at=n[13],
                    finished_at=n[14],
                )
                for n in self._db.execute(
                    "SELECT id, idx, node_id, node_type, title, predecessor_node_id, status, "
                    "inputs, process_data, outputs, error, elapsed_time, execution_metadata, "
                    "created_at, finished_at FROM node_executions WHERE workflow_run_id = ? "
                    "ORDER BY idx",
                    (run_id,),
                )
            ]
            files = [
                FileRecord(*f)
                for f in self._db.execute(
                    "SELECT id, variable, belongs_to, filename, extension, mime_type, size, "
                    "transfer_method, remote_url, path FROM files WHERE workflow_run_id = ?",
                    (run_id,),
                )
            ]
        return RunRecord(
            id=row[0],
            app_id=row[1],
            workflow_id=row[2],
            mode=row[3],
            user_id=row[4],
            status=row[5],
            inputs=_load(row[6]) or {},
            outputs=_load(row[7]) or {},
            error=row[8],
            elapsed_time=row[9],
            total_tokens=row[10],
            total_steps=row[11],
            exceptions_count=row[12],
            created_at=row[13],
            finished_at=row[14],
            nodes=nodes,
            files=files,
        )

    def messages(self, conversation_id: str) -> list[MessageRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, query, answer, status, error, total_tokens, created_at FROM messages "
                "WHERE conversation_id = ? ORDER BY seq",
                (conversation_id,),
            ).fetchall()
        return [MessageRecord(*row) for row in rows]

    def variables(self, conversation_id: str) -> dict[str, VariableValue]:
        with self._lock:
            rows = self._db.execute(
                "SELECT name, value_type, value FROM conversation_variables "
                "WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchall()
        return {name: VariableValue(kind, _load(value)) for name, kind, value in rows}

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _SQLiteTurn(Turn):
    def __init__(
        self,
        store: SQLiteStore,
        owner: str,
        app_id: str,
        user_id: str,
        mode: str,
        state: TurnState,
    ) -> None:
        self.store = store
        self.owner = owner
        self.app_id = app_id
        self.user_id = user_id
        self.mode = mode
        self.state = state
        self._open = True

    def commit(self, result: TurnResult) -> None:
        if not self._open:
            raise RuntimeError("turn already ended")
        try:
            self.store._commit_turn(self, result)
        finally:
            self._open = False

    def release(self) -> None:
        if self._open:
            self._open = False
            self.store._release(self.state.conversation_id, self.owner)


def _statements(script: str) -> list[str]:
    return [part.strip() for part in script.split(";") if part.strip()]


def _node_row(run_id: str, node: NodeExecutionRecord) -> tuple[Any, ...]:
    return (
        node.id,
        run_id,
        node.index,
        node.node_id,
        node.node_type,
        node.title,
        node.predecessor_node_id,
        node.status,
        _dump(node.inputs),
        _dump(node.process_data),
        _dump(node.outputs),
        node.error,
        node.elapsed_time,
        _dump(node.execution_metadata),
        node.created_at,
        node.finished_at,
    )


def _file_row(run_id: str, file: FileRecord) -> tuple[Any, ...]:
    return (
        file.id,
        run_id,
        file.variable,
        file.belongs_to,
        file.filename,
        file.extension,
        file.mime_type,
        file.size,
        file.transfer_method,
        file.remote_url,
        file.path,
    )


def default_path() -> Path:
    """`$FIRSTGATE_STATE`, else `$XDG_DATA_HOME/firstgate/state.db` (~/.local/share)."""
    explicit = os.environ.get("FIRSTGATE_STATE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "firstgate" / "state.db"


def open_store(path: str | Path | None = None) -> SQLiteStore:
    return SQLiteStore(default_path() if path is None else path)
