"""The store's logic, written once for every SQL backend.

A backend (`store.sqlite`, `store.postgres`) gives this class three things: a
`Database` (connections and transactions in its own dialect), its numbered
migrations, and where it is (for error messages, without credentials). Every
query here uses `?` placeholders and SQL that SQLite and PostgreSQL both speak
(`INSERT ... ON CONFLICT`, `COALESCE`, `LIMIT`).

Migration story: `schema_version` holds how many migrations have been
applied. Opening a database applies the missing ones in order, each in its own
transaction, re-reading the version under the write lock so two processes
opening the same database at once apply each migration once. A database from a
newer build (a version this build does not know) is refused instead of being
half understood. Migrations only ever append.

Conversation leases: a turn inserts a row in `conversation_leases` inside a
transaction that holds the backend's lease lock, so check-and-insert is atomic
across processes. A lease ends when the turn commits or releases it, when it
expires, or when the process that holds it is gone (same host, pid not
running), so a crash never leaves a conversation stuck.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from firstgate.store import run_journal
from firstgate.store.base import (
    AGENT_NODE_TYPE,
    FORM_SUBMITTED,
    FORM_WAITING,
    MESSAGE_NORMAL,
    SYS_FILES,
    CheckpointRecord,
    ConversationRecord,
    FeedbackRecord,
    FileRecord,
    FormRecord,
    HistoryTurn,
    MessageRecord,
    NodeExecutionRecord,
    RunRecord,
    Store,
    StoreError,
    Turn,
    TurnResult,
    TurnState,
    UploadRecord,
    VariableValue,
)

_POLL_S = 0.05  # how often a waiting turn looks at a held lease
# The statuses of a run that has not ended (its checkpoints write them).
_UNFINISHED = frozenset({"running", "paused"})
# A conversation's name when the caller did not give one: its first query, cut here.
NAME_CHARS = 50


class Cursor(Protocol):
    rowcount: int

    def fetchone(self) -> Sequence[Any] | None: ...
    def fetchall(self) -> Sequence[Sequence[Any]]: ...


class Tx(Protocol):
    """One open transaction: `?` placeholders, rows as sequences."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...


class Database(ABC):
    """A backend's connections, in its dialect."""

    @abstractmethod
    def transaction(self, *, leases: bool = False) -> AbstractContextManager[Tx]:
        """A transaction; `leases=True` also holds the lock that serialises lease
        changes (taken at the start, so a read-then-write inside cannot interleave)."""

    @abstractmethod
    def read(self) -> AbstractContextManager[Tx]:
        """A consistent read (no lock held afterwards)."""

    @abstractmethod
    def run_script(self, tx: Tx, script: str) -> None:
        """Run a migration's statements inside `tx`."""

    @abstractmethod
    def close(self) -> None: ...


def _dump(value: Any) -> str:
    # Values arrive as plain data (the runtime serialises files before they get here).
    return json.dumps(value, ensure_ascii=False, default=str)


def _load(text: str | None) -> Any:
    return json.loads(text) if text else None


def owner_token() -> str:
    """Who holds a lease: this host and process (so a dead holder is seen), and a nonce."""
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


def conversation_name(query: str) -> str:
    text = " ".join(query.split())
    return text if len(text) <= NAME_CHARS else text[: NAME_CHARS - 3] + "..."


class RelationalStore(Store):
    def __init__(
        self,
        db: Database,
        migrations: Sequence[str],
        where: str,
        journal: run_journal.RunJournal | None = None,
    ) -> None:
        self.db = db
        self.where = where  # for messages: a path, or a URL without its password
        self.journal = journal  # a backend's run journals (`store.run_journal`), if it keeps them
        self._migrate(migrations)

    # ---- transactions: what a run's journal holds reaches the tables first

    @contextmanager
    def _transaction(self, *, leases: bool = False) -> Iterator[Tx]:
        self._catch_up()
        with self.db.transaction(leases=leases) as tx:
            yield tx

    @contextmanager
    def _reading(self) -> Iterator[Tx]:
        self._catch_up()
        with self.db.read() as tx:
            yield tx

    def _catch_up(self) -> None:
        """Every journaled checkpoint of this store into the tables (a failure is the
        run's: it is told with its next checkpoint)."""
        journal = self.journal
        if journal is None or not journal.has_pending:
            return
        with journal.lock:
            for run_id in journal.pending_runs():
                try:
                    self._flush(run_id)
                except Exception as exc:  # noqa: BLE001 - the run's own error, not this caller's
                    journal.failed(run_id, exc)

    def _flush(self, run_id: str) -> None:
        journal = self.journal
        if journal is None:
            return
        with journal.lock:
            pending = journal.take(run_id)
            if pending is None:
                return
            try:
                with self.db.transaction() as tx:
                    self._apply_checkpoint(
                        tx, pending.record(), pending.run, pending.nodes, pending.writer
                    )
            finally:
                journal.done(pending)  # in the tables, or refused there: it never will be

    # ---- schema

    def schema_version(self) -> int:
        with self._reading() as tx:
            row = tx.execute("SELECT version FROM schema_version").fetchone()
        return int(row[0]) if row else 0

    def _migrate(self, migrations: Sequence[str]) -> None:
        # Under the lease lock: `CREATE TABLE IF NOT EXISTS` alone races in PostgreSQL.
        with self._transaction(leases=True) as tx:
            tx.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            if tx.execute("SELECT version FROM schema_version").fetchone() is None:
                tx.execute("INSERT INTO schema_version (version) VALUES (0)")
        current = self.schema_version()
        if current > len(migrations):
            raise StoreError(
                "errors.store.newerSchema", path=self.where, found=current, known=len(migrations)
            )
        for version in range(current + 1, len(migrations) + 1):
            with self._transaction(leases=True) as tx:
                # Another process may have applied it since we looked: the lock is
                # ours now, so this second look is the one that counts.
                (applied,) = tx.execute("SELECT version FROM schema_version").fetchone() or (0,)
                if applied >= version:
                    continue
                self.db.run_script(tx, migrations[version - 1])
                tx.execute("UPDATE schema_version SET version = ?", (version,))

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
        owner: str | None = None,
        take_over_from: str | None = None,
    ) -> Turn:
        owner = owner or owner_token()
        give_up = time.monotonic() + max(0.0, wait_seconds)
        while True:
            with self._transaction(leases=True) as tx:
                row = tx.execute(
                    "SELECT app_id, user_id FROM conversations WHERE id = ?", (conversation_id,)
                ).fetchone()
                if row is not None and (row[0] != app_id or row[1] != user_id):
                    raise StoreError(
                        "errors.store.foreignConversation", conversation=conversation_id
                    )
                if self._take_lease(tx, conversation_id, owner, lease_seconds, take_over_from):
                    state = self._state(tx, conversation_id, is_new=row is None)
                    return _RelationalTurn(self, owner, app_id, user_id, mode, state)
            if time.monotonic() >= give_up:
                raise StoreError("errors.store.conversationBusy", conversation=conversation_id)
            time.sleep(_POLL_S)

    def _take_lease(
        self,
        tx: Tx,
        conversation_id: str,
        owner: str,
        lease_seconds: float,
        take_over_from: str | None = None,
    ) -> bool:
        now = time.time()
        held = tx.execute(
            "SELECT owner, expires_at FROM conversation_leases WHERE conversation_id = ?",
            (conversation_id,),
        ).fetchone()
        live = held is not None and held[1] > now and not _owner_gone(held[0])
        if live and held[0] != take_over_from:
            return False
        tx.execute(
            "INSERT INTO conversation_leases (conversation_id, owner, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (conversation_id) DO UPDATE SET owner = excluded.owner, "
            "expires_at = excluded.expires_at",
            (conversation_id, owner, now + lease_seconds),
        )
        return True

    def _state(self, tx: Tx, conversation_id: str, *, is_new: bool) -> TurnState:
        state = TurnState(conversation_id=conversation_id, is_new=is_new)
        if is_new:
            return state
        for name, value_type, value in tx.execute(
            "SELECT name, value_type, value FROM conversation_variables WHERE conversation_id = ?",
            (conversation_id,),
        ).fetchall():
            state.variables[name] = VariableValue(value_type, _load(value))
        turns = tx.execute(
            "SELECT query, answer, workflow_run_id FROM messages WHERE conversation_id = ? "
            "AND status = ? ORDER BY seq",
            (conversation_id, MESSAGE_NORMAL),
        ).fetchall()
        thoughts, files = self._turn_details(tx, conversation_id)
        state.history = [
            HistoryTurn(query, answer, tuple(thoughts.get(run, ())), tuple(files.get(run, ())))
            for query, answer, run in turns
        ]
        state.dialogue_count = len(state.history)
        return state

    def _turn_details(
        self, tx: Tx, conversation_id: str
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[FileRecord]]]:
        """Each answered turn's agent rounds and the files its user sent, by run id."""
        thoughts: dict[str, list[dict[str, Any]]] = {}
        for run, process_data in tx.execute(
            "SELECT n.workflow_run_id, n.process_data FROM node_executions n "
            "JOIN messages m ON m.workflow_run_id = n.workflow_run_id "
            "WHERE m.conversation_id = ? AND m.status = ? AND n.node_type = ? "
            "ORDER BY m.seq, n.idx",
            (conversation_id, MESSAGE_NORMAL, AGENT_NODE_TYPE),
        ).fetchall():
            found = (_load(process_data) or {}).get("agent_thoughts")
            if isinstance(found, list):
                thoughts.setdefault(run, []).extend(t for t in found if isinstance(t, dict))
        files: dict[str, list[FileRecord]] = {}
        for run, *record in tx.execute(
            "SELECT f.workflow_run_id, f.id, f.variable, f.belongs_to, f.filename, f.extension, "
            "f.mime_type, f.size, f.transfer_method, f.remote_url, f.path FROM files f "
            "JOIN messages m ON m.workflow_run_id = f.workflow_run_id "
            "WHERE m.conversation_id = ? AND m.status = ? AND f.belongs_to = ? "
            "AND f.variable = ? ORDER BY m.seq",
            (conversation_id, MESSAGE_NORMAL, "user", SYS_FILES),
        ).fetchall():
            files.setdefault(run, []).append(FileRecord(*record))
        return thoughts, files

    def _release(self, conversation_id: str, owner: str) -> None:
        with self._transaction(leases=True) as tx:
            tx.execute(
                "DELETE FROM conversation_leases WHERE conversation_id = ? AND owner = ?",
                (conversation_id, owner),
            )

    def _commit_turn(self, turn: _RelationalTurn, result: TurnResult) -> None:
        state = turn.state
        message = result.message
        with self._transaction(leases=True) as tx:
            held = tx.execute(
                "SELECT owner FROM conversation_leases WHERE conversation_id = ?",
                (state.conversation_id,),
            ).fetchone()
            if held is None or held[0] != turn.owner:
                # Our lease expired and another turn took the conversation: writing
                # now could undo what that turn wrote.
                raise StoreError("errors.store.leaseLost", conversation=state.conversation_id)
            now = time.time()
            tx.execute(
                "INSERT INTO conversations (id, app_id, user_id, mode, dialogue_count, name, "
                "inputs, created_at, updated_at) VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at",
                (
                    state.conversation_id,
                    turn.app_id,
                    turn.user_id,
                    turn.mode,
                    conversation_name(message.query),
                    _dump(dict(result.run.inputs)),
                    now,
                    now,
                ),
            )
            self._insert_run(tx, result.run, state.conversation_id)
            (seq,) = tx.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE conversation_id = ?",
                (state.conversation_id,),
            ).fetchone() or (1,)
            tx.execute(
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
            if message.status == MESSAGE_NORMAL:
                tx.execute(
                    "UPDATE conversations SET dialogue_count = dialogue_count + 1 WHERE id = ?",
                    (state.conversation_id,),
                )
                for name, variable in result.variables.items():
                    tx.execute(
                        "INSERT INTO conversation_variables "
                        "(conversation_id, name, value_type, value, updated_at) "
                        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (conversation_id, name) DO UPDATE "
                        "SET value_type = excluded.value_type, value = excluded.value, "
                        "updated_at = excluded.updated_at",
                        (
                            state.conversation_id,
                            name,
                            variable.value_type,
                            _dump(variable.value),
                            now,
                        ),
                    )
            tx.execute(
                "DELETE FROM conversation_leases WHERE conversation_id = ? AND owner = ?",
                (state.conversation_id, turn.owner),
            )
        self._ended(result.run.id)

    # ---- runs

    def record_run(self, run: RunRecord) -> None:
        with self._transaction() as tx:
            self._insert_run(tx, run, None)
        self._ended(run.id)

    def _insert_run(self, tx: Tx, run: RunRecord, conversation_id: str | None) -> None:
        """A run that ended: its record (over what its checkpoints wrote), and its
        checkpoint goes. A run already recorded as ended stays as it was: a
        process that lost its hold on the run (it hung past its lease and another
        ended the run) changes nothing when it wakes."""
        found = tx.execute("SELECT status FROM workflow_runs WHERE id = ?", (run.id,)).fetchone()
        if found is not None and found[0] not in _UNFINISHED:
            return
        self._write_run(tx, run, conversation_id)
        tx.execute("DELETE FROM run_checkpoint_parts WHERE run_id = ?", (run.id,))
        tx.execute("DELETE FROM run_checkpoints WHERE run_id = ?", (run.id,))

    def _write_run(self, tx: Tx, run: RunRecord, conversation_id: str | None) -> None:
        # An upsert: a durable run's row and node executions are written while it runs.
        tx.execute(
            "INSERT INTO workflow_runs (id, app_id, workflow_id, mode, user_id, conversation_id, "
            "status, inputs, outputs, error, elapsed_time, total_tokens, total_steps, "
            "exceptions_count, created_at, finished_at, triggered_from) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET conversation_id = excluded.conversation_id, "
            "status = excluded.status, outputs = excluded.outputs, error = excluded.error, "
            "elapsed_time = excluded.elapsed_time, total_tokens = excluded.total_tokens, "
            "total_steps = excluded.total_steps, exceptions_count = excluded.exceptions_count, "
            "finished_at = excluded.finished_at",
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
                run.triggered_from,
            ),
        )
        if run.nodes:
            self._write_nodes(tx, run.id, run.nodes)
        if run.files:
            tx.executemany(
                "INSERT INTO files (id, workflow_run_id, variable, belongs_to, filename, "
                "extension, mime_type, size, transfer_method, remote_url, path) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (workflow_run_id, id) DO NOTHING",
                [_file_row(run.id, file) for file in run.files],
            )

    def _write_nodes(
        self,
        tx: Tx,
        run_id: str,
        nodes: Sequence[NodeExecutionRecord],
        held: Collection[str] = (),
    ) -> None:
        """Upsert node executions; `held`: the ids of those that hold their node's
        checkpoint outputs (`CheckpointRecord.held`)."""
        if len(nodes) == 1:
            tx.execute(_NODE_UPSERT, _node_row(run_id, nodes[0], nodes[0].id in held))
        else:
            rows = [_node_row(run_id, node, node.id in held) for node in nodes]
            tx.executemany(_NODE_UPSERT, rows)

    # ---- checkpoints

    def save_checkpoint(
        self,
        checkpoint: CheckpointRecord,
        run: RunRecord | None = None,
        nodes: Sequence[NodeExecutionRecord] = (),
        *,
        writer: str | None = None,
        journal: bool = False,
    ) -> None:
        writer = writer if writer is not None else checkpoint.owner
        runs = self.journal
        if runs is not None:
            run_id = checkpoint.run_id
            runs.raise_failed(run_id)
            bare = run is None or not (run.nodes or run.files)
            if journal and bare and checkpoint.status == "running" and runs.may_hold(run_id):
                if runs.append(checkpoint, writer, run, nodes).due(time.monotonic()):
                    self._flush(run_id)
                return
            self._flush(run_id)  # what the journal holds goes first
        with self.db.transaction() as tx:
            self._apply_checkpoint(tx, checkpoint, run, nodes, writer)
        if runs is not None:
            runs.committed(checkpoint.run_id)
            if checkpoint.status != "running":
                runs.retire(checkpoint.run_id)  # paused: it may go on in another process

    def _apply_checkpoint(
        self,
        tx: Tx,
        checkpoint: CheckpointRecord,
        run: RunRecord | None,
        nodes: Sequence[NodeExecutionRecord],
        writer: str | None,
    ) -> None:
        """One checkpoint into the tables: its head over the last (refused when the
        run ended or another writer holds it), its parts, the run's row (and what
        node executions and files its record has) and `nodes`, those holding
        their node's outputs marked."""
        now = time.time()
        # The common case is one UPDATE: the row is there and held by this writer.
        updated = tx.execute(
            "UPDATE run_checkpoints SET status = ?, version = ?, position = ?, snapshot = ?, "
            "owner = ?, lease_expires_at = ?, updated_at = ? "
            "WHERE run_id = ? AND (owner IS NULL OR owner = ?)",
            (
                checkpoint.status,
                checkpoint.version,
                checkpoint.position,
                checkpoint.snapshot,
                checkpoint.owner,
                checkpoint.lease_expires_at,
                now,
                checkpoint.run_id,
                writer,
            ),
        ).rowcount
        if updated == 0:
            self._first_checkpoint(tx, checkpoint, now)
        self._write_parts(tx, checkpoint)
        if run is not None:
            self._write_run(tx, run, None)
        if nodes:
            self._write_nodes(tx, checkpoint.run_id, nodes, set(checkpoint.held.values()))

    def _write_parts(self, tx: Tx, checkpoint: CheckpointRecord) -> None:
        for name, value in checkpoint.parts.items():
            tx.execute(
                "INSERT INTO run_checkpoint_parts (run_id, part, value) VALUES (?, ?, ?) "
                "ON CONFLICT (run_id, part) DO UPDATE SET value = excluded.value",
                (checkpoint.run_id, name, value),
            )

    def _replay(self, tx: Tx, found: CheckpointRecord, paths: Sequence[Any]) -> bool:
        """Apply the journaled checkpoints another process left (it died, or lost its
        hold) under the claim of `found`: those of the writer that holds it, node
        executions and parts as they are, the head when it is newer than the row's.
        True when the head moved."""
        position, moved = found.position, False
        for path in paths:
            for entry in run_journal.read(path):
                if entry.writer != found.owner:
                    continue  # a writer that lost the run: none of it counts
                checkpoint = entry.checkpoint
                if checkpoint.run_id != found.run_id:
                    continue
                if checkpoint.position > position:
                    tx.execute(
                        "UPDATE run_checkpoints SET version = ?, position = ?, snapshot = ?, "
                        "updated_at = ? WHERE run_id = ?",
                        (
                            checkpoint.version,
                            checkpoint.position,
                            checkpoint.snapshot,
                            time.time(),
                            found.run_id,
                        ),
                    )
                    position, moved = checkpoint.position, True
                self._write_parts(tx, checkpoint)
                if entry.run is not None:
                    self._write_run(tx, entry.run, None)
                if entry.nodes:
                    held = set(checkpoint.held.values())
                    self._write_nodes(tx, checkpoint.run_id, entry.nodes, held)
        return moved

    def _first_checkpoint(self, tx: Tx, checkpoint: CheckpointRecord, now: float) -> None:
        """No checkpoint row this writer may update: the run's first, unless the run
        has ended (someone else ended it: it stays ended) or another process holds
        it now (the INSERT then conflicts, and this writer's checkpoint fails)."""
        found = tx.execute(
            "SELECT status FROM workflow_runs WHERE id = ?", (checkpoint.run_id,)
        ).fetchone()
        if found is not None and found[0] not in _UNFINISHED:
            raise StoreError("errors.store.runEnded", run=checkpoint.run_id, status=found[0])
        tx.execute(
            f"INSERT INTO run_checkpoints ({_CHECKPOINT_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                checkpoint.run_id,
                checkpoint.app_id,
                checkpoint.workflow_id,
                checkpoint.graph_hash,
                checkpoint.status,
                checkpoint.version,
                checkpoint.position,
                checkpoint.snapshot,
                checkpoint.owner,
                checkpoint.lease_expires_at,
                checkpoint.attempts,
                checkpoint.created_at or now,
                now,
                checkpoint.task_id,
            ),
        )

    def checkpoint(self, run_id: str, *, whole: bool = True) -> CheckpointRecord | None:
        with self._reading() as tx:
            found = _checkpoint_row(tx, run_id)
            if found is None or not whole:
                return found
            parts = tx.execute(
                "SELECT part, value FROM run_checkpoint_parts WHERE run_id = ?", (run_id,)
            ).fetchall()
            held = tx.execute(
                "SELECT node_id, id FROM node_executions "
                "WHERE workflow_run_id = ? AND checkpoint_outputs = 1 ORDER BY idx",
                (run_id,),
            ).fetchall()
        return dataclasses.replace(found, parts={k: v for k, v in parts}, held=dict(held))

    def checkpoints(self, status: str | None = None) -> list[CheckpointRecord]:
        where, params = ("WHERE status = ?", (status,)) if status else ("", ())
        with self._reading() as tx:
            rows = tx.execute(
                f"SELECT {_CHECKPOINT_COLUMNS} FROM run_checkpoints {where} "
                "ORDER BY created_at, run_id",
                params,
            ).fetchall()
        return [CheckpointRecord(*row) for row in rows]

    def checkpoint_of_task(self, task_id: str) -> CheckpointRecord | None:
        with self._reading() as tx:
            row = tx.execute(
                f"SELECT {_CHECKPOINT_COLUMNS} FROM run_checkpoints WHERE task_id = ?",
                (task_id,),
            ).fetchone()
        return CheckpointRecord(*row) if row is not None else None

    def claim_checkpoint(
        self,
        run_id: str,
        *,
        owner: str,
        lease_seconds: float,
        statuses: Sequence[str],
        take_over: bool = False,
    ) -> CheckpointRecord | None:
        now = time.time()
        with self._transaction(leases=True) as tx:
            found = _checkpoint_row(tx, run_id)
            if found is None:
                return None
            held = (
                not take_over
                and found.owner is not None
                and found.owner != owner
                and (found.lease_expires_at or 0) > now
                and not _owner_gone(found.owner)
            )
            if found.status not in statuses or held:
                return None
            left = self.journal.left(run_id) if self.journal is not None else []
            if left and self._replay(tx, found, left):
                found = _checkpoint_row(tx, run_id)
                assert found is not None  # under the claim's lock: nobody removed it
            expires = now + lease_seconds
            tx.execute(
                "UPDATE run_checkpoints SET status = 'running', owner = ?, lease_expires_at = ?, "
                "attempts = attempts + 1, updated_at = ? WHERE run_id = ?",
                (owner, expires, now, run_id),
            )
        run_journal.remove(left)  # in the tables now, or never to count
        return dataclasses.replace(
            found,
            status="running",
            owner=owner,
            lease_expires_at=expires,
            attempts=found.attempts + 1,
            updated_at=now,
        )

    def delete_checkpoint(self, run_id: str) -> None:
        with self._transaction() as tx:
            tx.execute("DELETE FROM run_checkpoint_parts WHERE run_id = ?", (run_id,))
            tx.execute("DELETE FROM run_checkpoints WHERE run_id = ?", (run_id,))
        self._ended(run_id)

    def _ended(self, run_id: str) -> None:
        """The run has no checkpoint any more: no journal of it counts."""
        if self.journal is not None:
            run_journal.remove(self.journal.left(run_id))
            self.journal.forget(run_id)

    def run(self, run_id: str) -> RunRecord | None:
        with self._reading() as tx:
            row = tx.execute(
                f"SELECT {_RUN_COLUMNS} FROM workflow_runs WHERE id = ?", (run_id,)
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
                for n in tx.execute(
                    "SELECT id, idx, node_id, node_type, title, predecessor_node_id, status, "
                    "inputs, process_data, outputs, error, elapsed_time, execution_metadata, "
                    "created_at, finished_at FROM node_executions WHERE workflow_run_id = ? "
                    "ORDER BY idx",
                    (run_id,),
                ).fetchall()
            ]
            files = [
                FileRecord(*f)
                for f in tx.execute(
                    "SELECT id, variable, belongs_to, filename, extension, mime_type, size, "
                    "transfer_method, remote_url, path FROM files WHERE workflow_run_id = ?",
                    (run_id,),
                ).fetchall()
            ]
        return _run(row, nodes, files)

    def record_timeline(self, run_id: str, events: Sequence[Mapping[str, Any]]) -> None:
        with self._transaction() as tx:
            tx.execute("DELETE FROM run_timelines WHERE workflow_run_id = ?", (run_id,))
            tx.execute(
                "INSERT INTO run_timelines (workflow_run_id, events, created_at) VALUES (?, ?, ?)",
                (run_id, _dump(list(events)), time.time()),
            )

    def timeline(self, run_id: str) -> list[dict[str, Any]] | None:
        with self._reading() as tx:
            row = tx.execute(
                "SELECT events FROM run_timelines WHERE workflow_run_id = ?", (run_id,)
            ).fetchone()
        return None if row is None else list(_load(row[0]) or [])

    def run_page(
        self,
        *,
        app_id: str,
        status: str | None,
        keyword: str | None,
        created_after: float | None,
        created_before: float | None,
        page: int,
        limit: int,
    ) -> tuple[list[RunRecord], int]:
        # Workflow-mode runs only: a chat turn's run is its conversation's.
        where = "app_id = ? AND conversation_id IS NULL"
        params: list[Any] = [app_id]
        if status:
            where += " AND status = ?"
            params.append(status)
        if keyword:
            pattern = "%" + _like_escaped(keyword.lower()) + "%"
            where += (
                " AND (LOWER(inputs) LIKE ? ESCAPE '\\' OR LOWER(outputs) LIKE ? ESCAPE '\\'"
                " OR LOWER(user_id) LIKE ? ESCAPE '\\')"
            )
            params += [pattern, pattern, pattern]
        if created_after is not None:
            where += " AND created_at >= ?"
            params.append(created_after)
        if created_before is not None:
            where += " AND created_at <= ?"
            params.append(created_before)
        with self._reading() as tx:
            (total,) = tx.execute(
                f"SELECT COUNT(*) FROM workflow_runs WHERE {where}", params
            ).fetchone() or (0,)
            rows = tx.execute(
                f"SELECT {_RUN_COLUMNS} FROM workflow_runs WHERE {where} "
                "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
                (*params, limit, (page - 1) * limit),
            ).fetchall()
        return [_run(row, (), ()) for row in rows], int(total)

    def recent_runs(self, *, status: str | None, limit: int) -> list[RunRecord]:
        where, params = ("WHERE status = ?", [status]) if status else ("", [])
        with self._reading() as tx:
            rows = tx.execute(
                f"SELECT {_RUN_COLUMNS} FROM workflow_runs {where} "
                "ORDER BY created_at DESC, id DESC LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [_run(row, (), ()) for row in rows]

    def users(self, app_id: str) -> set[str]:
        with self._reading() as tx:
            rows = tx.execute(
                "SELECT user_id FROM workflow_runs WHERE app_id = ? "
                "UNION SELECT user_id FROM conversations WHERE app_id = ? "
                "UNION SELECT user_id FROM uploads WHERE app_id = ?",
                (app_id, app_id, app_id),
            ).fetchall()
        return {row[0] for row in rows}

    # ---- conversations and messages

    def messages(self, conversation_id: str) -> list[MessageRecord]:
        with self._reading() as tx:
            rows = tx.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages m "
                "JOIN workflow_runs r ON r.id = m.workflow_run_id "
                "WHERE m.conversation_id = ? ORDER BY m.seq",
                (conversation_id,),
            ).fetchall()
        return [_message(row) for row in rows]

    def message_page(
        self, conversation_id: str, *, before_id: str | None, limit: int
    ) -> tuple[list[MessageRecord], bool]:
        with self._reading() as tx:
            before = None
            if before_id:
                found = tx.execute(
                    "SELECT seq FROM messages WHERE id = ? AND conversation_id = ?",
                    (before_id, conversation_id),
                ).fetchone()
                if found is None:
                    raise KeyError(before_id)
                before = found[0]
            rows = tx.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages m "
                "JOIN workflow_runs r ON r.id = m.workflow_run_id "
                "WHERE m.conversation_id = ? AND m.seq < ? ORDER BY m.seq DESC LIMIT ?",
                (conversation_id, before if before is not None else 2**62, limit + 1),
            ).fetchall()
        has_more = len(rows) > limit
        return [_message(row) for row in reversed(rows[:limit])], has_more

    def conversation(self, conversation_id: str) -> ConversationRecord | None:
        with self._reading() as tx:
            row = tx.execute(
                f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE id = ?",
                (conversation_id,),
            ).fetchone()
        return _conversation(row) if row else None

    def conversations(
        self,
        *,
        app_id: str,
        user_id: str,
        after_id: str | None,
        limit: int,
        sort_by: str = "-updated_at",
    ) -> tuple[list[ConversationRecord], bool]:
        column = sort_by.lstrip("-")
        if column not in ("created_at", "updated_at"):
            raise ValueError(sort_by)
        descending = sort_by.startswith("-")
        order = f"{column} {'DESC' if descending else 'ASC'}, id {'DESC' if descending else 'ASC'}"
        where = "app_id = ? AND user_id = ?"
        params: list[Any] = [app_id, user_id]
        with self._reading() as tx:
            if after_id:
                anchor = tx.execute(
                    f"SELECT {column}, id FROM conversations WHERE id = ? AND {where}",
                    (after_id, app_id, user_id),
                ).fetchone()
                if anchor is None:
                    raise KeyError(after_id)
                cmp = "<" if descending else ">"
                where += f" AND ({column} {cmp} ? OR ({column} = ? AND id {cmp} ?))"
                params += [anchor[0], anchor[0], anchor[1]]
            rows = tx.execute(
                f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE {where} "
                f"ORDER BY {order} LIMIT ?",
                (*params, limit + 1),
            ).fetchall()
        return [_conversation(row) for row in rows[:limit]], len(rows) > limit

    def delete_conversation(self, conversation_id: str, *, app_id: str, user_id: str) -> bool:
        with self._transaction(leases=True) as tx:
            found = tx.execute(
                "SELECT id FROM conversations WHERE id = ? AND app_id = ? AND user_id = ?",
                (conversation_id, app_id, user_id),
            ).fetchone()
            if found is None:
                return False
            # Children first: not every backend cascades through every path.
            for sql in (
                "DELETE FROM message_feedbacks WHERE conversation_id = ?",
                "DELETE FROM messages WHERE conversation_id = ?",
                "DELETE FROM node_executions WHERE workflow_run_id IN "
                "(SELECT id FROM workflow_runs WHERE conversation_id = ?)",
                "DELETE FROM files WHERE workflow_run_id IN "
                "(SELECT id FROM workflow_runs WHERE conversation_id = ?)",
                "DELETE FROM run_checkpoint_parts WHERE run_id IN "
                "(SELECT id FROM workflow_runs WHERE conversation_id = ?)",
                "DELETE FROM run_checkpoints WHERE run_id IN "
                "(SELECT id FROM workflow_runs WHERE conversation_id = ?)",
                "DELETE FROM workflow_runs WHERE conversation_id = ?",
                "DELETE FROM conversation_variables WHERE conversation_id = ?",
                "DELETE FROM conversation_leases WHERE conversation_id = ?",
                "DELETE FROM conversations WHERE id = ?",
            ):
                tx.execute(sql, (conversation_id,))
        return True

    def variables(self, conversation_id: str) -> dict[str, VariableValue]:
        with self._reading() as tx:
            rows = tx.execute(
                "SELECT name, value_type, value FROM conversation_variables "
                "WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchall()
        return {name: VariableValue(kind, _load(value)) for name, kind, value in rows}

    def set_variable(self, conversation_id: str, name: str, value: VariableValue) -> None:
        with self._transaction() as tx:
            tx.execute(
                "INSERT INTO conversation_variables (conversation_id, name, value_type, value, "
                "updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (conversation_id, name) "
                "DO UPDATE SET value_type = excluded.value_type, value = excluded.value, "
                "updated_at = excluded.updated_at",
                (conversation_id, name, value.value_type, _dump(value.value), time.time()),
            )

    def rename_conversation(self, conversation_id: str, name: str) -> None:
        with self._transaction() as tx:
            tx.execute(
                "UPDATE conversations SET name = ?, updated_at = ? WHERE id = ?",
                (name, time.time(), conversation_id),
            )

    def message(self, message_id: str) -> MessageRecord | None:
        with self._reading() as tx:
            row = tx.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages m "
                "JOIN workflow_runs r ON r.id = m.workflow_run_id WHERE m.id = ?",
                (message_id,),
            ).fetchone()
        return _message(row) if row else None

    # ---- feedbacks

    def feedback(self, message_id: str) -> FeedbackRecord | None:
        with self._reading() as tx:
            row = tx.execute(
                f"SELECT {_FEEDBACK_COLUMNS} FROM message_feedbacks WHERE message_id = ?",
                (message_id,),
            ).fetchone()
        return FeedbackRecord(*row) if row else None

    def ratings(self, message_ids: Sequence[str]) -> dict[str, str]:
        if not message_ids:
            return {}
        marks = ", ".join("?" for _ in message_ids)
        with self._reading() as tx:
            rows = tx.execute(
                f"SELECT message_id, rating FROM message_feedbacks WHERE message_id IN ({marks})",
                tuple(message_ids),
            ).fetchall()
        return {row[0]: row[1] for row in rows}

    def set_feedback(self, feedback: FeedbackRecord) -> None:
        with self._transaction() as tx:
            tx.execute(
                f"INSERT INTO message_feedbacks ({_FEEDBACK_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (message_id) DO UPDATE SET "
                "rating = excluded.rating, content = excluded.content, "
                "updated_at = excluded.updated_at",
                (
                    feedback.message_id,
                    feedback.app_id,
                    feedback.conversation_id,
                    feedback.user_id,
                    feedback.rating,
                    feedback.content,
                    feedback.created_at,
                    feedback.updated_at,
                ),
            )

    def delete_feedback(self, message_id: str) -> bool:
        with self._transaction() as tx:
            found = tx.execute(
                "SELECT message_id FROM message_feedbacks WHERE message_id = ?", (message_id,)
            ).fetchone()
            tx.execute("DELETE FROM message_feedbacks WHERE message_id = ?", (message_id,))
        return found is not None

    def feedbacks(self, *, app_id: str, page: int, limit: int) -> list[FeedbackRecord]:
        with self._reading() as tx:
            rows = tx.execute(
                f"SELECT {_FEEDBACK_COLUMNS} FROM message_feedbacks WHERE app_id = ? "
                "ORDER BY updated_at DESC, message_id DESC LIMIT ? OFFSET ?",
                (app_id, limit, (page - 1) * limit),
            ).fetchall()
        return [FeedbackRecord(*row) for row in rows]

    # ---- uploads

    def add_upload(self, upload: UploadRecord) -> None:
        with self._transaction() as tx:
            tx.execute(
                f"INSERT INTO uploads ({_UPLOAD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    upload.id,
                    upload.app_id,
                    upload.user_id,
                    upload.name,
                    upload.size,
                    upload.extension,
                    upload.mime_type,
                    upload.path,
                    upload.created_at,
                ),
            )

    def upload(self, upload_id: str) -> UploadRecord | None:
        with self._reading() as tx:
            row = tx.execute(
                f"SELECT {_UPLOAD_COLUMNS} FROM uploads WHERE id = ?", (upload_id,)
            ).fetchone()
        return UploadRecord(*row) if row else None

    # ---- human-input forms

    def add_form(self, form: FormRecord) -> None:
        with self._transaction() as tx:
            tx.execute(
                f"INSERT INTO human_input_forms ({_FORM_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    form.id,
                    form.token,
                    form.app_id,
                    form.workflow_run_id,
                    form.node_id,
                    form.user_id,
                    _dump(form.definition),
                    form.status,
                    form.expires_at,
                    form.created_at,
                    form.action_id,
                    None if form.submission is None else _dump(form.submission),
                    form.closed_at,
                    form.source,
                ),
            )

    def form(self, token: str) -> FormRecord | None:
        with self._reading() as tx:
            row = tx.execute(
                f"SELECT {_FORM_COLUMNS} FROM human_input_forms WHERE token = ?", (token,)
            ).fetchone()
        return _form(row) if row else None

    def close_form(
        self,
        token: str,
        *,
        status: str,
        now: float,
        action_id: str | None = None,
        submission: Mapping[str, Any] | None = None,
    ) -> bool:
        # One UPDATE guarded by the state and the deadline: whichever process
        # runs it first closes the form, every later one changes nothing.
        deadline = "expires_at > ?" if status == FORM_SUBMITTED else "expires_at <= ?"
        with self._transaction() as tx:
            row = tx.execute(
                "UPDATE human_input_forms SET status = ?, action_id = ?, submission = ?, "
                f"closed_at = ? WHERE token = ? AND status = ? AND {deadline} RETURNING id",
                (
                    status,
                    action_id,
                    None if submission is None else _dump(submission),
                    now,
                    token,
                    FORM_WAITING,
                    now,
                ),
            ).fetchone()
        return row is not None

    def due_forms(self, now: float, limit: int = 100) -> list[FormRecord]:
        with self._reading() as tx:
            rows = tx.execute(
                f"SELECT {_FORM_COLUMNS} FROM human_input_forms "
                "WHERE status = ? AND expires_at <= ? ORDER BY expires_at LIMIT ?",
                (FORM_WAITING, now, limit),
            ).fetchall()
        return [_form(row) for row in rows]

    def run_forms(self, workflow_run_id: str) -> list[FormRecord]:
        with self._reading() as tx:
            rows = tx.execute(
                f"SELECT {_FORM_COLUMNS} FROM human_input_forms "
                "WHERE workflow_run_id = ? ORDER BY created_at",
                (workflow_run_id,),
            ).fetchall()
        return [_form(row) for row in rows]

    def note_form_source(self, workflow_run_id: str, source: str) -> None:
        with self._transaction() as tx:
            tx.execute(
                "UPDATE human_input_forms SET source = ? WHERE workflow_run_id = ?",
                (source, workflow_run_id),
            )

    def close(self) -> None:
        try:
            self._catch_up()  # a flush refused now (the run lost its hold) changes nothing
        finally:
            if self.journal is not None:
                self.journal.close()
            self.db.close()


_FORM_COLUMNS = (
    "id, token, app_id, workflow_run_id, node_id, user_id, definition, status, expires_at, "
    "created_at, action_id, submission, closed_at, source"
)


def _checkpoint_row(tx: Tx, run_id: str) -> CheckpointRecord | None:
    """The run's checkpoint row alone (no parts, no held marks)."""
    row = tx.execute(
        f"SELECT {_CHECKPOINT_COLUMNS} FROM run_checkpoints WHERE run_id = ?", (run_id,)
    ).fetchone()
    return CheckpointRecord(*row) if row is not None else None


def _form(row: Sequence[Any]) -> FormRecord:
    (form_id, token, app_id, run_id, node_id, user_id, definition, status, expires_at) = row[:9]
    created_at, action_id, submission, closed_at, source = row[9:]
    return FormRecord(
        id=form_id,
        token=token,
        app_id=app_id,
        workflow_run_id=run_id,
        node_id=node_id,
        user_id=user_id,
        definition=_load(definition) or {},
        expires_at=float(expires_at),
        created_at=float(created_at),
        status=status,
        action_id=action_id,
        submission=_load(submission),
        closed_at=None if closed_at is None else float(closed_at),
        source=source,
    )


_MESSAGE_COLUMNS = (
    "m.id, m.query, m.answer, m.status, m.error, m.total_tokens, m.created_at, "
    "m.conversation_id, r.inputs, m.workflow_run_id"
)
_CONVERSATION_COLUMNS = (
    "id, app_id, user_id, mode, name, inputs, dialogue_count, created_at, updated_at"
)
_RUN_COLUMNS = (
    "id, app_id, workflow_id, mode, user_id, status, inputs, outputs, error, elapsed_time, "
    "total_tokens, total_steps, exceptions_count, created_at, finished_at, triggered_from"
)
_FEEDBACK_COLUMNS = (
    "message_id, app_id, conversation_id, user_id, rating, content, created_at, updated_at"
)
_CHECKPOINT_COLUMNS = (
    "run_id, app_id, workflow_id, graph_hash, status, version, position, snapshot, owner, "
    "lease_expires_at, attempts, created_at, updated_at, task_id"
)
_UPLOAD_COLUMNS = "id, app_id, user_id, name, size, extension, mime_type, path, created_at"


def _like_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _run(
    row: Sequence[Any], nodes: Sequence[NodeExecutionRecord], files: Sequence[FileRecord]
) -> RunRecord:
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
        triggered_from=row[15],
    )


def _message(row: Sequence[Any]) -> MessageRecord:
    return MessageRecord(
        id=row[0],
        query=row[1],
        answer=row[2],
        status=row[3],
        error=row[4],
        total_tokens=row[5],
        created_at=row[6],
        conversation_id=row[7],
        inputs=_load(row[8]) or {},
        workflow_run_id=row[9],
    )


def _conversation(row: Sequence[Any]) -> ConversationRecord:
    return ConversationRecord(
        id=row[0],
        app_id=row[1],
        user_id=row[2],
        mode=row[3],
        name=row[4],
        inputs=_load(row[5]) or {},
        dialogue_count=row[6],
        created_at=row[7],
        updated_at=row[8],
    )


class _RelationalTurn(Turn):
    def __init__(
        self,
        store: RelationalStore,
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
        # A failed commit rolled back whole, the lease's deletion with it: the
        # turn still holds the conversation until `release` (or another commit).
        self.store._commit_turn(self, result)
        self._open = False

    def release(self) -> None:
        if self._open:
            self._open = False
            self.store._release(self.state.conversation_id, self.owner)


def statements(script: str) -> Iterator[str]:
    """A migration's statements (no `;` inside literals in our migrations)."""
    for part in script.split(";"):
        if part.strip():
            yield part.strip()


_NODE_UPSERT = (
    "INSERT INTO node_executions (id, workflow_run_id, idx, node_id, node_type, title, "
    "predecessor_node_id, status, inputs, process_data, outputs, error, elapsed_time, "
    "execution_metadata, created_at, finished_at, checkpoint_outputs) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET status = excluded.status, "
    "inputs = excluded.inputs, process_data = excluded.process_data, "
    "outputs = excluded.outputs, error = excluded.error, "
    "elapsed_time = excluded.elapsed_time, "
    "execution_metadata = excluded.execution_metadata, "
    "finished_at = excluded.finished_at, checkpoint_outputs = excluded.checkpoint_outputs"
)


def _node_row(run_id: str, node: NodeExecutionRecord, held: bool = False) -> tuple[Any, ...]:
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
        int(held),
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
