"""Conversations, messages, runs, node executions and files, in a real database.

`open_store(location)` opens (and migrates) the store: a PostgreSQL URL
(`postgresql://user:password@host:port/db`) opens `store.postgres`, anything
else is a SQLite file (`store.sqlite`). The runtime talks to it only through
`store.base.Store`; the SQL is written once, in `store.relational`.
"""

from __future__ import annotations

from pathlib import Path

from firstgate.store.base import (
    ConversationRecord,
    HistoryTurn,
    MessageRecord,
    RunRecord,
    Store,
    StoreError,
    Turn,
    TurnResult,
    TurnState,
    UploadRecord,
    VariableValue,
)
from firstgate.store.sqlite import SQLiteStore, default_path


def open_store(location: str | Path | None = None) -> Store:
    """The store at `location`: a PostgreSQL URL, a SQLite path, or None for the default file."""
    if isinstance(location, str) and "://" in location:
        from firstgate.common.redaction import redact_url
        from firstgate.store.postgres import PostgresStore, is_postgres_url

        if not is_postgres_url(location):
            raise StoreError("errors.store.unknownUrl", url=redact_url(location))
        return PostgresStore(location)
    return SQLiteStore(default_path() if location is None else location)


__all__ = [
    "ConversationRecord",
    "HistoryTurn",
    "MessageRecord",
    "RunRecord",
    "SQLiteStore",
    "Store",
    "StoreError",
    "Turn",
    "TurnResult",
    "TurnState",
    "UploadRecord",
    "VariableValue",
    "default_path",
    "open_store",
]
