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
Then nothing in the file counts any more.

A run whose process died leaves its journal; the process that takes the run
over applies it (`RelationalStore.claim_checkpoint`) before it goes on, so a node
that finished is not run again. Only the checkpoints of the writer that still
holds the run's checkpoint are applied: one that lost its hold wrote nothing
that counts.

Files: `<database>-journals/<run id>~<journal>.log`, one per run and store,
written from its start again after each flush (its pages stay the kernel's: a
write over them costs half a new one). A run that ends leaves its file to the
next run as a spare (`~<pid>-<journal>-<n>.log`, a name no run id matches;
`SPARES` of them at most, each cut to `FLUSH_BYTES`); spares of a process that
is gone are removed when a store opens the folder. A frame: its length, its CRC-32 (of its
generation and its body) and its generation (4 bytes each, big-endian), then
the checkpoint's records as plain data, pickled (`_PlainPickler`; read back
naming no class but the plain types). A flush makes the first frame
unreadable and starts a new generation; a reader takes the frames of the first
frame's generation, up to a torn or damaged one (a power cut during a write).
Only a run whose id is a plain file name (letters, digits, `-`, `_`: every id
firstgate makes) is journaled.
"""

from __future__ import annotations

import io
import operator
import os
import pickle
import re
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from firstgate.store.base import CheckpointRecord, NodeExecutionRecord, RunRecord

# How far behind a journaled run its tables may be (its progress shows this late
# to other processes), and how much it may hold in memory before they catch up.
FLUSH_S = 0.2
FLUSH_BYTES = 8 << 20
SPARES = 4  # ended runs' files kept for the next runs (their pages are written again)
_FRAME = struct.Struct(">III")  # length, CRC-32 (of the generation and the body), generation
_GENERATION = struct.Struct(">I")
_SUFFIX = ".log"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
_SPARE = re.compile(r"~(\d+)-[0-9a-f]+-\d+\.log")  # `~<pid>-<journal>-<n>.log`


@dataclass(frozen=True, slots=True)
class Entry:
    """One journaled checkpoint: who wrote it, its record, the run's row (a record
    without node executions or files) and the node executions written with it."""

    writer: str | None
    checkpoint: CheckpointRecord
    run: RunRecord | None
    nodes: list[NodeExecutionRecord]


@dataclass(slots=True)
class _File:
    """A run's journal file in this store: written from its start again after each
    flush (its pages are the kernel's already), each time under a new generation."""

    path: Path
    fd: int
    generation: int = 0
    seed: int = field(default_factory=lambda: _seed(0))  # the CRC of the generation
    written: int = 0  # how far into the file any frame went

    def next_generation(self) -> None:
        self.generation += 1
        self.seed = _seed(self.generation)


@dataclass(slots=True)
class Pending:
    """What a run's journal file holds that the tables do not: the latest checkpoint
    (with every part and held mark since the last flush), the latest run row and
    every node execution, in order (the records themselves: their rows are made
    when the tables catch up, all at once, as for a run recorded at its end)."""

    file: _File
    writer: str | None
    since: float
    checkpoint: CheckpointRecord
    parts: dict[str, str] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)
    run: RunRecord | None = None
    nodes: list[NodeExecutionRecord] = field(default_factory=list)
    size: int = 0  # bytes written to the file: where the next frame goes

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
        self._files: dict[str, _File] = {}
        self._spares: list[_File] = []  # ended runs' files, for the next runs
        self._made = 0  # spare names given
        self._swept = False  # spares of gone processes removed from the folder
        self._pending: dict[str, Pending] = {}
        self._failed: dict[str, BaseException] = {}
        self._committed: set[str] = set()  # runs whose checkpoint row this store wrote
        self._buffer = io.BytesIO()
        self._pickler = _PlainPickler(self._buffer, protocol=5)

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
        """Write one checkpoint to its run's journal (durable when this returns)."""
        with self.lock:
            body = self._pickled(writer, checkpoint, run, nodes)
            run_id = checkpoint.run_id
            pending = self._pending.get(run_id)
            if pending is None:
                pending = Pending(self._file(run_id), writer, time.monotonic(), checkpoint)
            file = pending.file
            header = _FRAME.pack(len(body), zlib.crc32(body, file.seed), file.generation)
            _write_all(file.fd, pending.size, header, body)
            pending.checkpoint = checkpoint
            pending.parts.update(checkpoint.parts)
            pending.held.update(checkpoint.held)
            if run is not None:
                pending.run = run
            pending.nodes.extend(nodes)
            pending.size += len(header) + len(body)
            file.written = max(file.written, pending.size)
            self._pending[run_id] = pending
            return pending

    def _pickled(
        self,
        writer: str | None,
        checkpoint: CheckpointRecord,
        run: RunRecord | None,
        nodes: Sequence[NodeExecutionRecord],
    ) -> bytes:
        """One checkpoint as plain data, pickled (one pickler for the journal, under
        its lock: making one costs as much as using it)."""
        buffer = self._buffer
        buffer.seek(0)
        buffer.truncate()
        self._pickler.clear_memo()
        self._pickler.dump(
            (
                writer,
                _record_values(checkpoint),
                _run_values(run) if run is not None else None,
                [_node_values(node) for node in nodes],
            )
        )
        return buffer.getvalue()

    def _file(self, run_id: str) -> _File:
        file = self._files.get(run_id)
        if file is None:
            path = self.directory / f"{run_id}~{self._name}{_SUFFIX}"
            file = self._files[run_id] = self._spare(path) or self._new(path)
        return file

    def _new(self, path: Path) -> _File:
        if not self._swept:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            _sweep(self.directory)
            self._swept = True
        return _File(path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))

    def _spare(self, path: Path) -> _File | None:
        """An ended run's file under the run's name: its first frame is unreadable
        already, and what follows is of older generations (`done`)."""
        while self._spares:
            file = self._spares.pop()
            try:
                os.rename(file.path, path)
            except FileNotFoundError:  # removed by a process that took us for gone
                os.close(file.fd)
                continue
            file.path = path
            return file
        return None

    def take(self, run_id: str) -> Pending | None:
        """The run's pending checkpoints, for a flush (under `lock`, as appends are)."""
        return self._pending.pop(run_id, None)

    def done(self, pending: Pending) -> None:
        """`pending` is in the tables (or will never be): the file holds nothing that
        counts (its first frame unreadable), and its next frames are of a new
        generation (what is left of the older ones after them is not read)."""
        file = pending.file
        os.pwrite(file.fd, bytes(_FRAME.size), 0)
        file.next_generation()

    def retire(self, run_id: str) -> None:
        """The run journals nothing more here for now (it paused or ended): its file
        is kept for the next run (a spare: no run's name), or goes."""
        with self.lock:
            if run_id in self._pending:
                return  # still pending: its flush comes first
            file = self._files.pop(run_id, None)
            if file is None:
                return
            if len(self._spares) < SPARES:
                spare = self.directory / f"~{os.getpid()}-{self._name}-{self._made}{_SUFFIX}"
                self._made += 1
                try:
                    if file.written > FLUSH_BYTES:  # one frame that big: not kept whole
                        os.ftruncate(file.fd, FLUSH_BYTES)
                        file.written = FLUSH_BYTES
                    os.rename(file.path, spare)
                except OSError:
                    pass  # not kept: it goes
                else:
                    file.path = spare
                    self._spares.append(file)
                    return
            os.close(file.fd)
            file.path.unlink(missing_ok=True)

    def failed(self, run_id: str, error: BaseException) -> None:
        """A flush of the run's checkpoints failed outside its writer: the writer is
        told with its next checkpoint (`raise_failed`)."""
        self._failed[run_id] = error

    def raise_failed(self, run_id: str) -> None:
        error = self._failed.pop(run_id, None)
        if error is not None:
            raise error

    def forget(self, run_id: str) -> None:
        """The run ended."""
        self.retire(run_id)
        self._committed.discard(run_id)
        self._failed.pop(run_id, None)

    def left(self, run_id: str) -> list[Path]:
        """Journal files of the run that are not this store's (another process's, or
        one that died). Takes no lock: it is called under the database's (a claim),
        which a flush takes after this journal's."""
        own = self._files.get(run_id)
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
        """After a last flush: every file goes (nothing in them counts any more)."""
        with self.lock:
            self._pending.clear()
            for file in [*self._files.values(), *self._spares]:
                os.close(file.fd)
                file.path.unlink(missing_ok=True)
            self._files.clear()
            self._spares.clear()


def read(path: Path) -> Iterator[Entry]:
    """The checkpoints of one journal file: the frames of its first frame's
    generation, up to the first torn or damaged one."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    at, generation = 0, None
    while at + _FRAME.size <= len(data):
        length, crc, found = _FRAME.unpack_from(data, at)
        body = data[at + _FRAME.size : at + _FRAME.size + length]
        if generation is not None and found != generation:
            return  # what an older generation left after the newest frames
        if len(body) < length or zlib.crc32(body, _seed(found)) != crc:
            return  # torn by a power cut: nothing after it was durable
        generation = found
        try:
            entry = _entry(body)
        except (pickle.UnpicklingError, EOFError, TypeError, ValueError):
            return  # written by something else than this module
        yield entry
        at += _FRAME.size + length


def _seed(generation: int) -> int:
    """Where a frame's CRC starts: the CRC of its generation (a frame of another
    generation fails the check even where the bytes after it happen to match)."""
    return zlib.crc32(_GENERATION.pack(generation))


def _sweep(directory: Path) -> None:
    """Remove the spares of processes that are gone (a process that died keeps
    its spares: nothing in them counts)."""
    for name in os.listdir(directory):
        found = _SPARE.fullmatch(name)
        if found is not None and not _alive(int(found.group(1))):
            (directory / name).unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True


def remove(paths: Sequence[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


class _PlainPickler(pickle.Pickler):
    """Pickles plain data only (what JSON holds, big integers and NaN exactly):
    anything else as the store's rows have it (`relational._dump`: its text), a
    mapping as a dict, a sequence as a list. Pickle, not JSON: a node's outputs
    (text, mostly) are copied as they are, not escaped."""

    def reducer_override(self, obj: Any) -> Any:
        # Called only for what pickle has no fast path for: never an exact dict,
        # list, tuple, str, int, float, bool or None. The plain types themselves
        # (what the reductions below call) go as the names the reader allows.
        if isinstance(obj, type) and obj in _PLAIN_TYPE_SET:
            return NotImplemented
        for kind in (str, bool, int, float):
            if isinstance(obj, kind):
                return kind, (kind(obj),)
        if isinstance(obj, Mapping):
            return dict, (dict(obj),)
        if isinstance(obj, list | tuple):
            return list, (list(obj),)
        return str, (str(obj),)


class _PlainUnpickler(pickle.Unpickler):
    """Reads back what `_PlainPickler` writes, and nothing that names any other
    class or function: a journal file someone else changed cannot run code."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _PLAIN_TYPES:
            return _PLAIN_TYPES[name]
        raise pickle.UnpicklingError(f"{module}.{name} is not journal data")


_PLAIN_TYPES: dict[str, type] = {t.__name__: t for t in (dict, list, str, bool, int, float)}
_PLAIN_TYPE_SET = frozenset(_PLAIN_TYPES.values())
_RECORD_FIELDS = tuple(f.name for f in fields(CheckpointRecord))
_RUN_FIELDS = tuple(f.name for f in fields(RunRecord) if f.name not in ("nodes", "files"))
_NODE_FIELDS = tuple(f.name for f in fields(NodeExecutionRecord))
_record_values = operator.attrgetter(*_RECORD_FIELDS)
_run_values = operator.attrgetter(*_RUN_FIELDS)
_node_values = operator.attrgetter(*_NODE_FIELDS)


def _entry(body: bytes) -> Entry:
    writer, record, run, nodes = _PlainUnpickler(io.BytesIO(body)).load()
    return Entry(
        writer=writer,
        checkpoint=CheckpointRecord(**dict(zip(_RECORD_FIELDS, record, strict=True))),
        run=RunRecord(**dict(zip(_RUN_FIELDS, run, strict=True))) if run is not None else None,
        nodes=[NodeExecutionRecord(**dict(zip(_NODE_FIELDS, n, strict=True))) for n in nodes],
    )


def _write_all(fd: int, offset: int, *pieces: bytes) -> None:
    written = os.pwritev(fd, pieces, offset)
    rest = b"".join(pieces)[written:]
    while rest:  # a regular file takes it whole but for a full disk
        offset += written
        written = os.pwrite(fd, rest, offset)
        rest = rest[written:]
