"""Conversations, messages, runs, node executions and files, in a real database.

`open_store(path)` opens (and migrates) the SQLite store; the runtime talks
to it only through `store.base.Store`, so another backend is one module.
"""

from store.base import (
    HistoryTurn,
    MessageRecord,
    RunRecord,
    Store,
    StoreError,
    Turn,
    TurnResult,
    TurnState,
    VariableValue,
)
from store.sqlite import SQLiteStore, default_path, open_store

__all__ = [
    "HistoryTurn",
    "MessageRecord",
    "RunRecord",
    "SQLiteStore",
    "Store",
    "StoreError",
    "Turn",
    "TurnResult",
    "TurnState",
    "VariableValue",
    "default_path",
    "open_store",
]
