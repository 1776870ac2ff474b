"""Run journals: how a SQLite store makes a per-node checkpoint durable with one
append to a file of the run's own, instead of a commit of its own.

A SQLite commit writes every page a checkpoint touches (the node execution's
row and its overflow, two indexes, the checkpoint's head, the file header:
about 7 pages, 15 system calls, and the WAL's copy back) and took a 1,000-node
chain with per-node durability to about 1.9x the CPU of the run recorded at its
end. A journaled checkpoint is one framed append to the run's journal file: like
SQLite's `synchronous = NORMAL` (no fsync), it survives the process, not a power
cut. The tables catch up in one transaction holding every checkpoint the
journal has (`Pending`): when `FLUSH_S` has passed since the first of them or
`FLUSH_BYTES` are pending, before anything else the store does (what a
process reads is what it wrote), and with the run's next checkpoint that is not
journaled (the run waits, pauses, starts a node unsafe to repeat, or ends).
Then the file goes.

A run whose process died leaves its journal; the process that takes the run
over applies it (`RelationalStore.claim_checkpoint`) before it goes on, so a node
that finished is not run again. Only the checkpoints of the writer that still
holds the run's checkpoint are applied: one that lost its hold wrote nothing
that counts.

Files: `<database>-journals/<run id>~<journal>~<sequence>.log`, one per
`Pending` (a flush in another thread never truncates what a run appends after
it). A frame: its length and its CRC-32 (4 bytes each, big-endian), then the
checkpoint as JSON (its records as they are, a value JSON has no word for as
its text, as the store's rows have it). A torn or damaged last frame (a power
cut during the write) ends the file. Only a run whose id is a plain file name
(letters, digits, `-`, `_`: every id firstgate makes) is journaled.
"""

from __future__ import annotations

import itertools
import os
import re
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from firstgate.store.base import CheckpointRecord, NodeExecutionRecord, RunRecord

# How far behind a journaled run its tables may be (its progress shows this late
# to other processes), and how much it may hold in memory before they catch up.
FLUSH_S = 0.2
FLUSH_BYTES = 8 << 20
_FRAME = struct.Struct(">II")  # length, CRC-32
_SUFFIX = ".log"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")


@dataclass(frozen=True, slots=True)
class Entry:
    """One journaled checkpoint: who wrote it, its record, the run's row (a record
    without node executions or files) and the node executions written with it."""

    writer: str | None
    checkpoint: CheckpointRecord
    run: RunRecord | None
    nodes: list[NodeExecutionRecord]


@dataclass(slots=True)
class Pending:
    """What a run's journal file holds that the tables do not: the latest checkpoint
    (with every part and held mark since the last flush), the latest run row and
    every node execution, in order (the records themselves: their rows are made
    when the tables catch up, all at once, as for a run recorded at its end)."""

    path: Path
    fd: int
    writer: str | None
    since: float
    checkpoint: CheckpointRecord
    parts: dict[str, str] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)
    run: RunRecord | None = None
    nodes: list[NodeExecutionRecord] = field(default_factory=list)
    size: int = 0

    def record(self) -> CheckpointRecord:
        return replace(self.checkpoint, parts=self.parts, held=self.held)

    def due(self, now: float) -> bool:
        return now - self.since >= FLUSH_S or self.size >= FLUSH_BYTES


class RunJournal:
    """The run journals of one store (one SQLite database file)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.lock = threading.RLock()  # appends and flushes, in order
        self._name = uuid.uuid4().hex[:12]
        self._sequence = itertools.count()
        self._pending: dict[str, Pending] = {}
        self._failed: dict[str, BaseException] = {}
        self._committed: set[str] = set()  # runs whose checkpoint row this store wrote

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def pending_runs(self) -> list[str]:
        return list(self._pending)

    def committed(self, run_id: str) -> None:
        """The run's checkpoint row is in the tables (a journaled one may follow)."""
        if _PLAIN_NAME.fullmatch(run_id):
            self._committed.add(run_id)

    def may_hold(self, run_id: str) -> bool:
        return run_id in self._committed

    def append(
        self,
        checkpoint: CheckpointRecord,
        writer: str | None,
        run: RunRecord | None,
        nodes: Sequence[NodeExecutionRecord],
    ) -> Pending:
        """Write one checkpoint to its run's journal (durable when this returns).
        Raises TypeError for what JSON cannot hold (the caller makes it storable)."""
        body = _dumps(writer, checkpoint, run, nodes)
        with self.lock:
            pending = self._pending.get(checkpoint.run_id)
            if pending is None:
                pending = self._open(checkpoint, writer)
            _write_all(pending.fd, _FRAME.pack(len(body), zlib.crc32(body)), body)
            pending.checkpoint = checkpoint
            pending.parts.update(checkpoint.parts)
            pending.held.update(checkpoint.held)
            if run is not None:
                pending.run = run
            pending.nodes.extend(nodes)
            pending.size += len(body)
            self._pending[checkpoint.run_id] = pending
            return pending

    def _open(self, checkpoint: CheckpointRecord, writer: str | None) -> Pending:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = f"{checkpoint.run_id}~{self._name}~{next(self._sequence):08d}{_SUFFIX}"
        path = self.directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        return Pending(path, fd, writer, time.monotonic(), checkpoint)

    def take(self, run_id: str) -> Pending | None:
        """The run's pending checkpoints, for a flush (a later append opens a new file)."""
        return self._pending.pop(run_id, None)

    def done(self, pending: Pending) -> None:
        """`pending` is in the tables (or will never be): its file goes."""
        os.close(pending.fd)
        pending.path.unlink(missing_ok=True)

    def failed(self, run_id: str, error: BaseException) -> None:
        """A flush of the run's checkpoints failed outside its writer: the writer is
        told with its next checkpoint (`raise_failed`)."""
        self._failed[run_id] = error

    def raise_failed(self, run_id: str) -> None:
        error = self._failed.pop(run_id, None)
        if error is not None:
            raise error

    def forget(self, run_id: str) -> None:
        self._committed.discard(run_id)
        self._failed.pop(run_id, None)

    def left(self, run_id: str) -> list[Path]:
        """Journal files of the run that no pending checkpoint of this store writes
        (another process's, or one that died), in the order they were written. Takes
        no lock: it is called under the database's (a claim), which a flush takes
        after this journal's."""
        own = self._pending.get(run_id)
        try:
            names = [n for n in os.listdir(self.directory) if n.startswith(f"{run_id}~")]
        except FileNotFoundError:
            return []
        return [
            self.directory / n
            for n in sorted(names)
            if n.endswith(_SUFFIX) and (own is None or self.directory / n != own.path)
        ]

    def close(self) -> None:
        with self.lock:
            for pending in self._pending.values():
                os.close(pending.fd)
            self._pending.clear()


def read(path: Path) -> Iterator[Entry]:
    """The checkpoints of one journal file, up to its first torn or damaged frame."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    at = 0
    while at + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, at)
        body = data[at + _FRAME.size : at + _FRAME.size + length]
        if len(body) < length or zlib.crc32(body) != crc:
            return  # torn by a power cut: nothing after it was durable
        try:
            yield _entry(orjson.loads(body))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return
        at += _FRAME.size + length


def remove(paths: Sequence[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _dumps(
    writer: str | None,
    checkpoint: CheckpointRecord,
    run: RunRecord | None,
    nodes: Sequence[NodeExecutionRecord],
) -> bytes:
    # As the store's rows do (`relational._dump`): anything else becomes its text.
    return orjson.dumps(
        {"writer": writer, "checkpoint": checkpoint, "run": run, "nodes": nodes},
        default=str,
        option=orjson.OPT_NON_STR_KEYS,
    )


def _entry(data: dict[str, Any]) -> Entry:
    run = data["run"]
    return Entry(
        writer=data["writer"],
        checkpoint=CheckpointRecord(**data["checkpoint"]),
        run=RunRecord(**{**run, "nodes": (), "files": ()}) if run is not None else None,
        nodes=[NodeExecutionRecord(**node) for node in data["nodes"]],
    )


def _write_all(fd: int, *pieces: bytes) -> None:
    written = os.writev(fd, pieces)
    rest = b"".join(pieces)[written:]
    while rest:  # a regular file takes it whole but for a full disk
        rest = rest[os.write(fd, rest) :]
