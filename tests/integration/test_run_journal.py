"""Run journals on a real SQLite file: a per-node checkpoint written as one append
to the run's journal, the tables catching up before the store answers anything,
and a journal left by a process that died applied by whoever takes its run over."""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import pickle
import sqlite3
import subprocess
import sys
import textwrap
import time
import zlib
from fractions import Fraction
from pathlib import Path

import pytest
from firstgate.store import run_journal
from firstgate.store.base import CheckpointRecord, NodeExecutionRecord, RunRecord
from firstgate.store.relational import owner_token
from firstgate.store.sqlite import SQLiteStore

RUN = "run-journal-1"
ROOT = Path(__file__).resolve().parents[2]


def _checkpoint(position: int, owner: str | None, held: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CheckpointRecord(
        run_id=RUN, app_id="app", workflow_id="wf", graph_hash="g", status="running",
        version=2, position=position, snapshot=json.dumps({"position": position}),
        owner=owner, lease_expires_at=time.time() + 60, created_at=time.time(),
        task_id="task-1", held=held or {},
    )  # fmt: skip


def _run() -> RunRecord:
    now = time.time()
    return RunRecord(
        id=RUN, app_id="app", workflow_id="wf", mode="workflow", user_id="u",
        status="running", inputs={}, outputs={}, error=None, elapsed_time=0.0,
        total_tokens=0, total_steps=0, exceptions_count=0, created_at=now, finished_at=now,
    )  # fmt: skip


def _node(index: int) -> NodeExecutionRecord:
    now = time.time()
    return NodeExecutionRecord(
        id=f"exec-{index}", index=index, node_id=f"n{index}", node_type="code",
        title=f"N{index}", predecessor_node_id=None, status="succeeded", inputs={},
        process_data={}, outputs={"text": f"out {index}"}, error=None, elapsed_time=0.01,
        execution_metadata={}, created_at=now, finished_at=now,
    )  # fmt: skip


def _started(path: Path) -> tuple[SQLiteStore, str]:
    """A store on `path` with the run's first checkpoint committed, by a new owner."""
    store = SQLiteStore(path)
    owner = owner_token()
    store.save_checkpoint(_checkpoint(1, owner), _run(), [], writer=owner)
    return store, owner


def _journal_node(store: SQLiteStore, index: int, owner: str) -> None:
    """Node `index` finished: its checkpoint (position 10 + index) held by its execution."""
    checkpoint = _checkpoint(10 + index, owner, {f"n{index}": f"exec-{index}"})
    store.save_checkpoint(checkpoint, None, [_node(index)], writer=owner, journal=True)


def _raw_nodes(path: Path) -> list[str]:
    """The node executions in the file, read past the store (another process's view)."""
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute("SELECT id FROM node_executions ORDER BY idx")]
    finally:
        db.close()


def _journals(path: Path) -> list[Path]:
    directory = Path(f"{path}-journals")
    return sorted(directory.glob(f"{RUN}~*.log")) if directory.exists() else []


def _frame_starts(data: bytes) -> list[int]:
    starts, at = [], 0
    while at < len(data):
        starts.append(at)
        length = run_journal._FRAME.unpack_from(data, at)[0]
        at += run_journal._FRAME.size + length
    return starts


def _die_after_journaling(path: Path, nodes: int) -> str:
    """A process that writes the run's first checkpoint, journals `nodes` node
    checkpoints and dies before its tables catch up; its owner token."""
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from tests.integration.test_run_journal import _checkpoint, _journal_node, _run
        from firstgate.store.relational import owner_token
        from firstgate.store.sqlite import SQLiteStore
        store = SQLiteStore(Path({str(path)!r}))
        owner = owner_token()
        store.save_checkpoint(_checkpoint(1, owner), _run(), [], writer=owner)
        for index in range({nodes}):
            _journal_node(store, index, owner)
        print(owner, flush=True)
        os._exit(0)  # as a SIGKILL would: nothing flushed, nothing closed
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_a_journaled_checkpoint_is_in_the_journal_first_and_in_the_tables_when_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    store, owner = _started(path)
    try:
        _journal_node(store, 0, owner)
        _journal_node(store, 1, owner)
        (journal,) = _journals(path)
        assert [e.checkpoint.position for e in run_journal.read(journal)] == [10, 11]
        assert _raw_nodes(path) == []  # another process does not see them yet
        record = store.checkpoint(RUN)  # this one does: its tables catch up first
        assert record is not None and record.position == 11
        assert record.held == {"n0": "exec-0", "n1": "exec-1"}
        assert _raw_nodes(path) == ["exec-0", "exec-1"]
        assert [list(run_journal.read(j)) for j in _journals(path)] == [[]]  # nothing counts
    finally:
        store.close()
    assert _journals(path) == []


def test_the_tables_catch_up_once_the_flush_period_has_passed(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store, owner = _started(path)
    try:
        _journal_node(store, 0, owner)
        assert _raw_nodes(path) == []
        time.sleep(run_journal.FLUSH_S + 0.05)
        _journal_node(store, 1, owner)  # due: this one brings both
        assert _raw_nodes(path) == ["exec-0", "exec-1"]
        _journal_node(store, 2, owner)  # the file again from its start, a new generation
        (journal,) = _journals(path)
        assert [e.checkpoint.position for e in run_journal.read(journal)] == [12]
    finally:
        store.close()


def test_a_journal_left_by_a_dead_process_is_applied_when_its_run_is_taken_over(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    _die_after_journaling(path, 3)
    assert _raw_nodes(path) == [] and len(_journals(path)) == 1
    store = SQLiteStore(path)
    try:
        found = store.checkpoint(RUN)
        assert found is not None and found.position == 1  # what the tables had
        claimed = store.claim_checkpoint(
            RUN, owner=owner_token(), lease_seconds=60, statuses=("running",)
        )
        assert claimed is not None and claimed.position == 12  # the journal's last
        record = store.checkpoint(RUN)
        assert record is not None and record.held == {f"n{i}": f"exec-{i}" for i in range(3)}
        assert json.loads(record.snapshot) == {"position": 12}
        run = store.run(RUN)
        assert run is not None and [n.outputs["text"] for n in run.nodes] == [
            "out 0",
            "out 1",
            "out 2",
        ]
        assert _journals(path) == []
    finally:
        store.close()


def test_a_torn_or_damaged_last_frame_ends_the_journal(tmp_path: Path) -> None:
    """A power cut during a write may leave half a frame, or a frame whose bytes
    are not what was written: the journal ends before it."""
    for case in ("torn", "damaged"):
        path = tmp_path / case / "state.db"
        path.parent.mkdir()
        _die_after_journaling(path, 3)
        (journal,) = _journals(path)
        data = journal.read_bytes()
        last = _frame_starts(data)[-1]
        if case == "torn":
            journal.write_bytes(data[: last + 40])
        else:  # the same length, one byte changed: only the checksum tells
            at = len(data) - 10
            journal.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :])
        store = SQLiteStore(path)
        try:
            claimed = store.claim_checkpoint(
                RUN, owner=owner_token(), lease_seconds=60, statuses=("running",)
            )
            assert claimed is not None and claimed.position == 11, case
            assert _raw_nodes(path) == ["exec-0", "exec-1"], case
        finally:
            store.close()


def test_what_a_writer_journals_after_losing_the_run_counts_for_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    stale, taker, third = SQLiteStore(path), SQLiteStore(path), SQLiteStore(path)
    try:
        first = owner_token()
        stale.save_checkpoint(_checkpoint(1, first), _run(), [], writer=first)
        second = owner_token()
        assert taker.claim_checkpoint(
            RUN, owner=second, lease_seconds=60, statuses=("running",), take_over=True
        )
        _journal_node(stale, 0, first)  # it does not know yet: the append works
        assert len(_journals(path)) == 1
        claimed = third.claim_checkpoint(
            RUN, owner=owner_token(), lease_seconds=60, statuses=("running",), take_over=True
        )
        assert claimed is not None and claimed.position == 1
        assert _raw_nodes(path) == []
        _journal_node(stale, 1, first)
        # A read in the writer's process brings its tables up to date: refused there
        # (another holds the run), which is the run's error, not the reader's ...
        record = stale.checkpoint(RUN)
        assert record is not None and record.position == 1
        assert _raw_nodes(path) == []
        with pytest.raises(sqlite3.IntegrityError):  # ... told with its next checkpoint
            _journal_node(stale, 2, first)
    finally:
        for store in (stale, taker, third):
            store.close()


def test_a_journal_older_than_the_tables_does_not_move_the_head_back(tmp_path: Path) -> None:
    """A process that died after its tables caught up but before it removed its
    journal leaves a file the tables are ahead of."""
    path = tmp_path / "state.db"
    store, owner = _started(path)
    try:
        _journal_node(store, 0, owner)
        (journal,) = _journals(path)
        kept = journal.read_bytes()
        store.checkpoint(RUN)  # caught up
        store.save_checkpoint(_checkpoint(30, owner), None, [], writer=owner)
    finally:
        store.close()
    journal.write_bytes(kept)  # as if it had died before its journal was cleared
    # The owner's process is this one, alive: the claim takes the run over.
    other = SQLiteStore(path)
    try:
        claimed = other.claim_checkpoint(
            RUN, owner=owner_token(), lease_seconds=60, statuses=("running",), take_over=True
        )
        assert claimed is not None and claimed.position == 30
        assert _raw_nodes(path) == ["exec-0"]
        assert _journals(path) == []
    finally:
        other.close()


def test_a_run_that_ends_takes_what_its_journal_held_and_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store, owner = _started(path)
    try:
        _journal_node(store, 0, owner)
        ended = dataclasses.replace(_run(), status="succeeded")
        store.record_run(ended)
        assert _raw_nodes(path) == ["exec-0"]
        assert store.checkpoint(RUN) is None
        assert _journals(path) == []
        # What is left is a spare for the next run, under no run's name, holding
        # nothing that reads as a checkpoint.
        (spare,) = Path(f"{path}-journals").iterdir()
        assert spare.name.startswith(f"~{os.getpid()}-")
        assert list(run_journal.read(spare)) == []
    finally:
        store.close()
    assert not os.listdir(f"{path}-journals")  # a closed store keeps no spare


def test_the_next_run_writes_an_ended_runs_file_and_reads_only_its_own_frames(
    tmp_path: Path,
) -> None:
    """An ended run's file (its frames of older generations behind a first one made
    unreadable) is the next run's journal: what replay reads there is the next
    run's checkpoints, and only those."""
    journal = run_journal.RunJournal(tmp_path / "journals")
    other = "run-journal-2"
    try:
        for position in (10, 11, 12):
            journal.append(_checkpoint(position, "w"), "w", None, [_node(position)])
        pending = journal.take(RUN)
        assert pending is not None
        journal.done(pending)
        first = pending.file.path
        size = os.stat(first).st_size
        journal.retire(RUN)
        assert not first.exists()
        journal.append(dataclasses.replace(_checkpoint(20, "w"), run_id=other), "w", None, [])
        (path,) = (tmp_path / "journals").iterdir()
        # The same file: the older frames are still there behind the new one.
        assert path.name.startswith(f"{other}~") and os.stat(path).st_size == size
        found = list(run_journal.read(path))
        assert [(e.checkpoint.run_id, e.checkpoint.position) for e in found] == [(other, 20)]
    finally:
        journal.close()


def test_spares_of_a_process_that_is_gone_are_removed_when_a_store_opens_the_folder(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "journals"
    directory.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (directory / f"~{gone}-0123456789ab-0.log").write_bytes(b"\0" * 64)
    alive = directory / f"~{os.getpid()}-0123456789ab-0.log"
    alive.write_bytes(b"\0" * 64)
    journal = run_journal.RunJournal(directory)
    try:
        journal.append(_checkpoint(10, "w"), "w", None, [])
        names = sorted(p.name for p in directory.iterdir())
        assert names == sorted([alive.name, f"{RUN}~{journal._name}.log"])
    finally:
        journal.close()


def test_a_run_ended_elsewhere_leaves_no_journal_of_a_dead_process(tmp_path: Path) -> None:
    """A run whose process died is ended by another (stopped, say) without being
    taken over: the journal it left goes with its checkpoint."""
    path = tmp_path / "state.db"
    _die_after_journaling(path, 2)
    assert len(_journals(path)) == 1
    store = SQLiteStore(path)
    try:
        store.record_run(dataclasses.replace(_run(), status="stopped"))
        assert store.checkpoint(RUN) is None
        assert _journals(path) == []
    finally:
        store.close()


def test_frames_an_older_generation_left_behind_the_newest_are_not_read(
    tmp_path: Path,
) -> None:
    """After a flush the file is written from its start again: a frame of the same
    size as the older ones ends exactly where the next older one starts."""
    journal = run_journal.RunJournal(tmp_path / "journals")

    def same_size(position: int) -> CheckpointRecord:
        return dataclasses.replace(
            _checkpoint(position, "w"), lease_expires_at=1.0, created_at=1.0, snapshot="{}"
        )

    try:
        for position in (10, 11, 12):
            journal.append(same_size(position), "w", None, [])
        pending = journal.take(RUN)
        assert pending is not None
        journal.done(pending)  # the tables have them
        path = pending.file.path
        assert list(run_journal.read(path)) == []
        journal.append(same_size(13), "w", None, [])
        assert [e.checkpoint.position for e in run_journal.read(path)] == [13]
    finally:
        journal.close()


class _Odd:
    def __str__(self) -> str:
        return "an odd value"


def test_a_replayed_node_execution_holds_what_a_commit_would_have(tmp_path: Path) -> None:
    """Big integers, NaN, a value JSON has no word for (its text, as the store's
    rows have it), a mapping that is not a dict: as the tables would have them."""
    path = tmp_path / "state.db"
    writer, taker = SQLiteStore(path), SQLiteStore(path)
    outputs = {
        "big": 2**70,
        "nan": math.nan,
        "odd": _Odd(),
        "ordered": collections.OrderedDict(a=1),
        "named": Fraction(1, 3),
    }
    try:
        owner = owner_token()
        writer.save_checkpoint(_checkpoint(1, owner), _run(), [], writer=owner)
        node = dataclasses.replace(_node(0), outputs=outputs)
        checkpoint = _checkpoint(10, owner, {"n0": "exec-0"})
        writer.save_checkpoint(checkpoint, None, [node], writer=owner, journal=True)
        claimed = taker.claim_checkpoint(
            RUN, owner=owner_token(), lease_seconds=60, statuses=("running",), take_over=True
        )
        assert claimed is not None and claimed.position == 10
        run = taker.run(RUN)
        assert run is not None
        (replayed,) = run.nodes
        assert replayed.outputs["big"] == 2**70
        assert math.isnan(replayed.outputs["nan"])
        assert replayed.outputs["odd"] == "an odd value"
        assert replayed.outputs["ordered"] == {"a": 1}
        assert replayed.outputs["named"] == "1/3"
    finally:
        writer.close()
        taker.close()


def test_a_journal_that_names_a_function_runs_nothing(tmp_path: Path) -> None:
    """A journal file changed by someone else: a frame whose pickle would call a
    function is refused, and the claim goes on from the tables."""
    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    marker = tmp_path / "ran"
    try:
        owner = owner_token()
        store.save_checkpoint(_checkpoint(1, owner), _run(), [], writer=owner)

        class _Call:
            def __reduce__(self):  # type: ignore[no-untyped-def]
                return (os.system, (f"touch {marker}",))

        body = pickle.dumps(_Call())
        frame = run_journal._FRAME.pack(len(body), zlib.crc32(body, run_journal._seed(0)), 0)
        directory = Path(f"{path}-journals")
        directory.mkdir()
        (directory / f"{RUN}~forged.log").write_bytes(frame + body)
        claimed = store.claim_checkpoint(
            RUN, owner=owner_token(), lease_seconds=60, statuses=("running",), take_over=True
        )
        assert claimed is not None and claimed.position == 1
        assert not marker.exists()
    finally:
        store.close()
