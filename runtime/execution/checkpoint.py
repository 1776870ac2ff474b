"""A run's checkpoint: the versioned snapshot of its state at a node boundary,
how it is written to the store, and how it is read back.

The snapshot (`Snapshot`, pydantic: it crosses process boundaries through the
store) holds everything a run needs to go on in another process: who it is
(`RunState`: the run, task, conversation and message ids), the hash of the app's
graph it ran (`graph_hash`: a snapshot of a changed app is refused), the inputs
and `sys.*`, the event position, the report's totals (`RunReport.state`), and
the top graph's frame (`FrameState`): every variable written (node outputs,
conversation variables pending for the turn), node and edge states, the
response streams' positions, the node executions in flight, the paused ones,
and the containers in flight: what their finished rounds made, their variables,
and their rounds in flight, each a frame of its own (`FrameState`, recursively).

`version` is checked first: a snapshot of a newer firstgate is refused, an older
one is migrated step by step (`_MIGRATIONS`), never read as if it were current.
Values are JSON, with files (`common.files.File`) kept whole, their local path
included (`encode` / `decode`); tuples come back as lists.

A finished node's outputs are written once, not again with every later
checkpoint: the snapshot's head stays small however long the run. When the
node's execution, written in the same transaction, holds exactly those outputs
(nothing in them was redacted or made storable), the execution is marked as
holding them (`CheckpointRecord.held`): a durable run writes a node's outputs
once, and a per-node checkpoint is the node's execution and the head, nothing
more. Otherwise they go whole into a *part* of the checkpoint
(`CheckpointRecord.parts`, `outputs:<node>`). Checkpoints of firstgate before
the mark named the execution in a part (`record:<node>` = its id): still read.
"""

from __future__ import annotations

import enum
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from firstgate.common.files import File, FileType, TransferMethod
from firstgate.locales.localized_error import LocalizedError
from firstgate.nodes.base import NodeNotice
from firstgate.runtime.execution.events import RunInfo
from firstgate.store.base import CheckpointRecord, NodeExecutionRecord, RunRecord, Store
from pydantic import BaseModel, ConfigDict, Field, ValidationError

SNAPSHOT_VERSION = 2
# The batched durability's period: a crash loses at most this much finished work,
# progress shows this late, and a run shorter than this commits only at its end.
DEFAULT_BATCH_MS = 200
# How often a durable run's row (its status, steps, elapsed: its progress) is
# rewritten; its node executions and its checkpoint go with every commit.
PROGRESS_S = 0.2
RUNNING = "running"
PAUSED = "paused"
_FILE_KEY = "__firstgate_file__"
_FLOAT_KEY = "__firstgate_float__"  # NaN and the infinities, which JSON has no word for
_OUTPUTS_PART = "outputs:"  # a part holding one finished node's outputs (top frame)
_RECORD_PART = "record:"  # a part naming the node execution that holds them


class CheckpointError(LocalizedError):
    """A checkpoint cannot be used: unreadable, of another version, of a changed app,
    of a run that is not waiting to be resumed."""


class Durability(enum.StrEnum):
    """When a run's state reaches the store (`RunOptions.durability`).

    NODE: every finished node is durable before its successors start. BATCHED:
    a commit at most every `durability_batch_ms`. END: only when the run ends
    or pauses (what a run did before checkpoints)."""

    NODE = "node"
    BATCHED = "batched"
    END = "end"


@dataclass(frozen=True, slots=True)
class Resolved:
    """How a paused node finishes when its run resumes: its outputs, the handle of
    the edge it takes (None: its success edge), what its events say it read and
    did, and the events it wants out before its `node_finished`."""

    outputs: Mapping[str, Any] = field(default_factory=dict)
    handle: str | None = None
    inputs: Mapping[str, Any] = field(default_factory=dict)
    process_data: Mapping[str, Any] = field(default_factory=dict)
    events: tuple[NodeNotice, ...] = ()


# ---- values


_PLAIN = (str, int, bool, type(None))


def encode(value: Any) -> Any:
    """`value` as JSON data, files and non-finite floats kept (`decode` gives them back)."""
    # Checked in the order values come (a checkpoint encodes at every node).
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is float:
        return value if math.isfinite(value) else {_FLOAT_KEY: repr(value)}
    if kind is dict:
        return {str(k): encode(v) for k, v in value.items()}
    if kind is list:
        return [encode(v) for v in value]
    if isinstance(value, File):
        return {
            _FILE_KEY: {
                "type": value.type.value,
                "transfer_method": value.transfer_method.value,
                "filename": value.filename,
                "extension": value.extension,
                "mime_type": value.mime_type,
                "size": value.size,
                "id": value.id,
                "related_id": value.related_id,
                "remote_url": value.remote_url,
                "path": str(value.path) if value.path is not None else None,
                "link": value.link,
            }
        }
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, float):
        return encode(float(value))
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)  # what the store's records do with anything else


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        found = value.get(_FILE_KEY)
        if isinstance(found, dict) and len(value) == 1:
            return _file(found)
        number = value.get(_FLOAT_KEY)
        if number in ("nan", "inf", "-inf") and len(value) == 1:
            return float(number)
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def dumps(data: Any) -> str:
    """JSON text of `encode`d data. orjson: the head is written at every node, and
    the standard encoder spent about 20 us a node on it; an integer past 64 bits
    (orjson refuses those) goes through the standard one."""
    try:
        return orjson.dumps(data).decode()
    except TypeError:
        return json.dumps(data, ensure_ascii=False)


def _file(fields: dict[str, Any]) -> File:
    path = fields.get("path")
    return File(
        type=FileType(fields["type"]),
        transfer_method=TransferMethod(fields["transfer_method"]),
        filename=str(fields["filename"]),
        extension=str(fields["extension"]),
        mime_type=str(fields["mime_type"]),
        size=int(fields["size"]),
        id=str(fields["id"]),
        related_id=fields.get("related_id"),
        remote_url=fields.get("remote_url"),
        path=Path(path) if path else None,
        link=fields.get("link"),
    )


# ---- the snapshot


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExecutionState(_Model):
    """A node execution: its id (Dify's), order, predecessor and start time."""

    id: str
    node_id: str
    index: int
    predecessor: str | None = None
    created_at: int = 0


class ReadyState(_Model):
    """A node made ready by the last finished node, not started yet."""

    node_id: str
    predecessor: str | None = None


class PausedState(_Model):
    """A node that paused the run (`nodes.base.Pause`): what it paused with."""

    execution: ExecutionState
    payload: dict[str, Any] = Field(default_factory=dict)
    reason: dict[str, Any] = Field(default_factory=dict)


class ContainerState(_Model):
    """A container in flight: its execution, the rounds it started, the latest
    one's index, the container's variables (a loop's, as its rounds left them),
    the tokens its rounds used, `progress` (what its finished rounds made, as
    its `ContainerRun.saved()` gave it: a resumed run starts none of them again)
    and `frames`, its rounds in flight (each a `FrameState` with its index: a
    resumed run goes on with them where they were). `progress` None: nothing is
    known of its rounds (a version 1 snapshot, or a container that was
    stopping): it runs again from its first round."""

    execution: ExecutionState
    kind: str
    rounds: int
    round_index: int | None = None
    variables: dict[str, Any] = Field(default_factory=dict)
    tokens: int = 0
    progress: dict[str, Any] | None  # required: a v1 snapshot is migrated to None
    frames: list[FrameState] = Field(default_factory=list)


class FrameState(_Model):
    """A graph's state: the top graph's, or a container round's (`index`):
    variables by head (node ids, `sys`, `conversation`; a round's own: its
    nodes' outputs and its `item`/`index`), scheduler, response streams, what
    runs, what is paused, the containers in flight."""

    index: int = 0
    values: dict[str, dict[str, Any]]
    scheduler: dict[str, Any]
    streamer: dict[str, Any] | None = None
    chunk_target: dict[str, str | None] = Field(default_factory=dict)
    ready: list[ReadyState] = Field(default_factory=list)
    running: list[ExecutionState] = Field(default_factory=list)
    paused: list[PausedState] = Field(default_factory=list)
    containers: list[ContainerState] = Field(default_factory=list)
    error: str | None = None  # a round that failed (its nodes still running end it)
    broke: bool = False  # a loop's round that asked the loop to end

    def frames(self) -> Iterator[FrameState]:
        """This frame and every round frame under it."""
        yield self
        for container in self.containers:
            for frame in container.frames:
                yield from frame.frames()


ContainerState.model_rebuild()


class RunState(_Model):
    task_id: str
    workflow_run_id: str
    workflow_id: str
    app_id: str
    mode: str
    user_id: str
    created_at: int
    conversation_id: str | None = None
    message_id: str | None = None

    @classmethod
    def of(cls, info: RunInfo) -> RunState:
        return cls(
            task_id=info.task_id,
            workflow_run_id=info.workflow_run_id,
            workflow_id=info.workflow_id,
            app_id=info.app_id,
            mode=info.mode,
            user_id=info.user_id,
            created_at=info.created_at,
            conversation_id=info.conversation_id,
            message_id=info.message_id,
        )

    def info(self) -> RunInfo:
        return RunInfo(**self.model_dump())


class Snapshot(_Model):
    version: int = SNAPSHOT_VERSION
    graph_hash: str
    run: RunState
    inputs: dict[str, Any]
    query: str | None = None
    root: str | None = None  # the node the run started at (a trigger's), when not the first
    started_at: float  # wall clock, when the run was first started
    position: int  # events the run has sent (the next one's position)
    report: dict[str, Any]
    frame: FrameState
    taken_at: float = Field(default_factory=time.time)

    @property
    def status(self) -> str:
        frames = list(self.frame.frames())
        paused = any(f.paused for f in frames)
        return PAUSED if paused and not any(f.running for f in frames) else RUNNING

    def paused_nodes(self) -> list[str]:
        """The paused nodes, a container round's too (by node id: of a
        container's rounds, one at a time pauses)."""
        return [p.execution.node_id for f in self.frame.frames() for p in f.paused]


def _containers_from_1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 kept no container's rounds: its containers rerun from the first."""
    frame = data.get("frame")
    if isinstance(frame, dict):
        for container in frame.get("containers") or []:
            if isinstance(container, dict):
                container["progress"] = None
    return {**data, "version": 2}


# Older snapshot versions, each migrated to the next (version -> function).
_MIGRATIONS: dict[int, Any] = {1: _containers_from_1}


def load(
    text: str,
    parts: Mapping[str, str] | None = None,
    executions: Mapping[str, Mapping[str, Any]] | None = None,
) -> Snapshot:
    """A snapshot from its JSON text (and the parts written with earlier
    checkpoints; `executions`: node execution id -> outputs, for the parts that
    name one); CheckpointError when it is unreadable or of an unknown version."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CheckpointError("errors.checkpoint.unreadable", detail=str(exc)) from None
    version = data.get("version") if isinstance(data, dict) else None
    if not isinstance(version, int):
        raise CheckpointError("errors.checkpoint.unreadable", detail="no version")
    if version > SNAPSHOT_VERSION:
        raise CheckpointError("errors.checkpoint.newer", found=version, known=SNAPSHOT_VERSION)
    while version < SNAPSHOT_VERSION:
        migrate = _MIGRATIONS.get(version)
        if migrate is None:
            raise CheckpointError("errors.checkpoint.tooOld", found=version, known=SNAPSHOT_VERSION)
        data = migrate(data)
        version = data["version"]
    try:
        snapshot = Snapshot.model_validate(data)
    except ValidationError as exc:
        raise CheckpointError("errors.checkpoint.unreadable", detail=_first_error(exc)) from None
    if parts:
        values = dict(snapshot.frame.values)
        for name, value in parts.items():
            if name.startswith(_OUTPUTS_PART):
                values.setdefault(name[len(_OUTPUTS_PART) :], json.loads(value))
            elif name.startswith(_RECORD_PART):
                held = (executions or {}).get(value)
                if held is None:
                    detail = f"node execution {value} of {name[len(_RECORD_PART) :]} is missing"
                    raise CheckpointError("errors.checkpoint.unreadable", detail=detail)
                values.setdefault(name[len(_RECORD_PART) :], dict(held))
        snapshot = snapshot.model_copy(
            update={"frame": snapshot.frame.model_copy(update={"values": values})}
        )
    return snapshot


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"


def check_graph(snapshot: Snapshot, graph_hash: str, name: str) -> None:
    """Refuse a snapshot taken while the app's graph was another."""
    if snapshot.graph_hash != graph_hash:
        raise CheckpointError(
            "errors.checkpoint.graphChanged", run=snapshot.run.workflow_run_id, app=name
        )


class Checkpointer:
    """Writes one run's checkpoints to the store: the snapshot's head each time,
    each finished node's outputs once (a part), the node executions not yet
    written, and the run's row (status `running` or `paused`). The head is
    plain data the engine made from its own state (it is validated, as a
    `Snapshot`, where it is read back: `load`)."""

    def __init__(self, store: Store, *, owner: str | None, lease_seconds: float) -> None:
        self.store = store
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.attempts = 0
        self._written: set[str] = set()  # node ids whose outputs are a part already
        self._created_at = 0.0

    def resumed(self, record: CheckpointRecord) -> None:
        """Continue the checkpoints of a run read back from `record`."""
        self.attempts = record.attempts
        self._created_at = record.created_at
        self._written = {n for p in record.parts if (n := _part_node(p)) is not None}
        self._written.update(record.held)

    def save(
        self,
        info: RunInfo,
        head: dict[str, Any],
        parts: Mapping[str, Any],
        run: RunRecord | None,
        nodes: Sequence[NodeExecutionRecord],
        *,
        status: str,
        in_records: Mapping[str, str] | None = None,
        journal: bool = False,
    ) -> None:
        """Write one checkpoint: `head` (the snapshot's data without the finished
        nodes' outputs), `parts` (node id -> outputs, of the nodes finished since
        the last one), the run's row (`run`, when given) and the node executions
        finished since the last one; `in_records`: node id -> the id of one of those
        executions whose outputs are exactly the node's (marked, no part);
        `journal`: the store may keep it in the run's journal first (a per-node
        checkpoint: `Store.save_checkpoint`)."""
        now = time.time()
        self._created_at = self._created_at or now
        held = status == RUNNING and self.owner is not None
        held_by = {n: i for n, i in (in_records or {}).items() if n not in self._written}
        record = CheckpointRecord(
            run_id=info.workflow_run_id,
            app_id=info.app_id,
            workflow_id=info.workflow_id,
            graph_hash=str(head["graph_hash"]),
            status=status,
            version=SNAPSHOT_VERSION,
            position=int(head["position"]),
            snapshot=dumps(head),
            owner=self.owner if held else None,
            lease_expires_at=now + self.lease_seconds if held else None,
            attempts=self.attempts,
            created_at=self._created_at,
            task_id=info.task_id,
            parts={
                _OUTPUTS_PART + node: dumps(value)
                for node, value in parts.items()
                if node not in self._written and node not in held_by
            },
            held=held_by,
        )
        self.store.save_checkpoint(record, run, nodes, writer=self.owner, journal=journal)
        self._written.update(parts)


def _part_node(name: str) -> str | None:
    """The node whose outputs a part holds (or names)."""
    for prefix in (_OUTPUTS_PART, _RECORD_PART):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return None


def read(store: Store, run_id: str) -> tuple[Snapshot, CheckpointRecord]:
    """The run's latest checkpoint; CheckpointError when it has none (it finished,
    was stopped, or never wrote one)."""
    record = store.checkpoint(run_id)
    if record is None:
        run = store.run(run_id)
        if run is None:
            raise CheckpointError("errors.checkpoint.unknownRun", run=run_id)
        raise CheckpointError("errors.checkpoint.ended", run=run_id, status=run.status)
    executions: dict[str, Mapping[str, Any]] = {}
    parts = {**record.parts, **{_RECORD_PART + n: i for n, i in record.held.items()}}
    if record.held or any(name.startswith(_RECORD_PART) for name in record.parts):
        run = store.run(run_id)
        executions = {node.id: node.outputs for node in run.nodes} if run is not None else {}
    return load(record.snapshot, parts, executions), record


def head(store: Store, run_id: str) -> tuple[Snapshot, CheckpointRecord] | None:
    """The run's latest checkpoint as its head stands (ids, position, the report's
    totals; not its finished nodes' outputs, which `read` adds), None when it has
    none."""
    record = store.checkpoint(run_id, whole=False)
    if record is None:
        return None
    return load(record.snapshot), record


def paused_of_task(store: Store, task_id: str) -> tuple[Snapshot, CheckpointRecord] | None:
    """The head of the paused run of task `task_id` (a stop names the task: one
    that reaches a process the run did not pause in), None when no run of that
    task waits paused."""
    record = store.checkpoint_of_task(task_id)
    if record is None or record.status != PAUSED:
        return None
    return load(record.snapshot), record


def node_values(values: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {head: encode(names) for head, names in values.items()}


def restored_values(values: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {head: decode(dict(names)) for head, names in values.items()}


def executions(items: Sequence[ExecutionState]) -> list[ExecutionState]:
    return sorted(items, key=lambda e: e.index)
