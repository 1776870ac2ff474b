"""What a run's timeline keeps (`serve/timeline.py`): node events with their
times, no streamed text, no node data twice; bounded; and a recorded run
replayed, with a kept timeline or rebuilt from its node executions."""

from __future__ import annotations

from pathlib import Path

from firstgate.serve import timeline
from firstgate.serve.timeline import TimelineRecorder, replay
from firstgate.store import open_store
from firstgate.store.base import NodeExecutionRecord, RunRecord


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _node(index: int, node_id: str, **meta: object) -> NodeExecutionRecord:
    return NodeExecutionRecord(
        id=f"x{index}", index=index, node_id=node_id, node_type="llm", title=node_id.title(),
        predecessor_node_id=None, status="succeeded", inputs={"q": "in"}, process_data={"p": 1},
        outputs={"text": "out"}, error=None, elapsed_time=1.0, execution_metadata=meta,
        created_at=1001.0, finished_at=1002.0,
    )  # fmt: skip


def _record(nodes: tuple[NodeExecutionRecord, ...]) -> RunRecord:
    return RunRecord(
        id="r1", app_id="a", workflow_id="w", mode="workflow", user_id="u", status="succeeded",
        inputs={}, outputs={"text": "out"}, error=None, elapsed_time=3.0, total_tokens=9,
        total_steps=len(nodes), exceptions_count=0, created_at=1000.0, finished_at=1003.0,
        nodes=nodes,
    )  # fmt: skip


def test_the_recorder_keeps_node_events_with_their_times_and_leaves_out_text() -> None:
    clock = Clock()
    recorder = TimelineRecorder(clock)
    recorder.see({"event": "workflow_started", "data": {"id": "r1"}})
    clock.now = 100.5
    recorder.see({"event": "text_chunk", "data": {"text": "hello"}})
    recorder.see({"event": "message", "answer": "hello"})
    clock.now = 101.25
    recorder.see(
        {
            "event": "node_finished",
            "data": {"id": "x1", "status": "failed", "inputs": {"q": 1}, "outputs": {}, "error": "e" * 5000},
        }
    )  # fmt: skip
    assert [(e["event"], e["t"]) for e in recorder.events] == [
        ("workflow_started", 0.0),
        ("node_finished", 1.25),
    ]
    data = recorder.events[1]["data"]
    assert "inputs" not in data and "outputs" not in data  # the node executions hold them
    assert len(data["error"]) == timeline.MAX_TEXT + 1  # cut, with an ellipsis


def test_a_timeline_past_its_bound_keeps_the_ends() -> None:
    recorder = TimelineRecorder(Clock())
    for _ in range(timeline.MAX_EVENTS + 10):
        recorder.see({"event": "node_waiting", "data": {"id": "x"}})
    recorder.see({"event": "workflow_finished", "data": {"status": "succeeded"}})
    assert len(recorder.events) == timeline.MAX_EVENTS + 1 and recorder.dropped == 10
    assert recorder.events[-1]["event"] == "workflow_finished"


def test_a_kept_timeline_is_replayed_with_the_node_data(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "state.db"))
    try:
        record = _record((_node(1, "writer"),))
        store.record_run(record)
        clock = Clock()
        recorder = TimelineRecorder(clock)
        recorder.see({"event": "node_started", "data": {"id": "x1"}})
        clock.now = 102.0
        recorder.see({"event": "node_finished", "data": {"id": "x1", "inputs": {}}})
        recorder.see({"event": "workflow_finished", "data": {"outputs": {"text": "out"}}})
        assert "outputs" not in recorder.events[2]["data"]  # the record holds them
        recorder.save(store, "r1")
        events = replay(store, store.run("r1"))  # type: ignore[arg-type]
        assert events[1]["t"] == 2.0
        assert events[1]["data"]["outputs"] == {"text": "out"}
        assert events[1]["data"]["process_data"] == {"p": 1}
        assert events[2]["data"]["outputs"] == {"text": "out"}
    finally:
        store.close()


def test_a_run_without_a_timeline_is_rebuilt_from_its_node_executions(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "state.db"))
    try:
        nodes = (_node(1, "each"), _node(2, "shout", iteration_id="each", iteration_index=0))
        store.record_run(_record(nodes))
        events = replay(store, store.run("r1"))  # type: ignore[arg-type]
        names = [e["event"] for e in events]
        assert names[0] == "workflow_started" and names[-1] == "workflow_finished"
        # The node that others name as their iteration is replayed as the container.
        assert "iteration_started" in names and "iteration_completed" in names
        child = next(e for e in events if e["event"] == "node_finished")
        assert child["data"]["iteration_id"] == "each" and child["t"] == 2.0
        assert [e["t"] for e in events] == sorted(e["t"] for e in events)
        # The node times tie (whole seconds): the container ends after its round's node.
        assert names.index("iteration_completed") > names.index("node_finished")
    finally:
        store.close()


def test_a_run_the_store_never_recorded_keeps_no_timeline(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    store = open_store(str(tmp_path / "state.db"))
    try:
        recorder = TimelineRecorder(Clock())
        recorder.see({"event": "workflow_started", "data": {}})
        recorder.save(store, "never-recorded")  # logged, never raised
        assert store.timeline("never-recorded") is None
        assert "was not kept" in caplog.text
    finally:
        store.close()


def test_text_no_store_can_hold_is_mended_before_it_is_kept(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "state.db"))
    try:
        store.record_run(_record(()))
        recorder = TimelineRecorder(Clock())
        # What a server or a run may put in an error: a NUL, half a surrogate pair.
        recorder.see({"event": "node_retry", "data": {"error": "bad\x00 \udfff end"}})
        recorder.save(store, "r1")
        (kept,) = store.timeline("r1") or []
        assert kept["data"]["error"] == "bad\ufffd \ufffd end"
    finally:
        store.close()


def test_a_resumed_runs_timeline_goes_on_from_what_was_kept() -> None:
    clock = Clock()
    before = [{"event": "workflow_paused", "t": 4.5, "data": {}}]
    recorder = TimelineRecorder(clock, prior=before)
    recorder.see({"event": "node_started", "data": {"id": "x2"}})
    clock.now = 101.0
    recorder.see({"event": "workflow_finished", "data": {}})
    assert [(e["event"], e["t"]) for e in recorder.events] == [
        ("workflow_paused", 4.5),
        ("node_started", 4.5),
        ("workflow_finished", 5.5),
    ]
