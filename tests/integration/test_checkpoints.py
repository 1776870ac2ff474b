"""Checkpoints and the engine's pause primitive over real stores (SQLite files and
a real PostgreSQL server): a run pauses at the test-only pausing node
(`tests/fakes/pausing_node.py`), its process exits, and another process resumes
it from the store under the same ids, its positions going on."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from firstgate.common.files import File, FileType, TransferMethod
from firstgate.runtime import RunOptions, RunResources, load_workflow
from firstgate.runtime.execution import checkpoint as cp
from firstgate.runtime.execution import events as ev
from firstgate.store import open_store

from tests.fakes import pausing_node
from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[2]


def node(node_id: str, node_type: str, **data: Any) -> dict[str, Any]:
    return {"id": node_id, "data": {"type": node_type, "title": node_id, **data}}


def edge(source: str, target: str, handle: str = "source") -> dict[str, Any]:
    return {"source": source, "target": target, "sourceHandle": handle}


def template(node_id: str, text: str, **variables: list[str]) -> dict[str, Any]:
    selectors = [{"variable": k, "value_selector": v} for k, v in variables.items()]
    return node(node_id, "template-transform", template=text, variables=selectors)


def pausing_doc() -> dict[str, Any]:
    """start -> before -> ask (pauses) -yes-> after -> end; -no-> refused."""
    nodes = [
        node("start", "start", variables=[{"variable": "q", "type": "text-input"}]),
        template("before", "before {{ q }}", q=["start", "q"]),
        node("ask", "test-pause", prompt="go on?"),
        template("after", "{{ b }} / {{ a }}", b=["before", "output"], a=["ask", "answer"]),
        node("end", "end", outputs=[{"variable": "out", "value_selector": ["after", "output"]}]),
        node("refused", "end", outputs=[{"variable": "out", "value_selector": ["ask", "answer"]}]),
    ]
    edges = [
        edge("start", "before"),
        edge("before", "ask"),
        edge("ask", "after", "yes"),
        edge("after", "end"),
        edge("ask", "refused", "no"),
    ]
    return {
        "kind": "app",
        "app": {"mode": "workflow", "name": "pausing"},
        "workflow": {"graph": {"nodes": nodes, "edges": edges}},
    }


def text_file(path: Path, related_id: str) -> File:
    """A one-byte local text file, as an upload makes one."""
    path.write_text("x", encoding="utf-8")
    return File(
        type=FileType.DOCUMENT,
        transfer_method=TransferMethod.LOCAL_FILE,
        filename=path.name,
        extension=".txt",
        mime_type="text/plain",
        size=1,
        related_id=related_id,
        path=path,
    )


@pytest.fixture(autouse=True)
def _pausing_node() -> Iterator[None]:
    with pausing_node.registered():
        yield


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    return request.getfixturevalue("postgres_url")


def child(*args: str) -> tuple[int, list[dict[str, Any]]]:
    """Run `tests/checkpoint_child.py` in a process of its own; its JSON lines."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.checkpoint_child", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode in (0, 3), done.stderr
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()]


def write_doc(tmp_path: Path, doc: dict[str, Any], name: str = "app.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def names(events: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in events]


def test_a_paused_run_resumes_in_another_process(tmp_path: Path, location: str) -> None:
    doc = write_doc(tmp_path, pausing_doc())
    code, first = child("run", location, doc, json.dumps({"q": "hi"}))
    assert code == 0
    assert names(first)[-2:] == ["test_pause_required", "workflow_paused"]
    assert "workflow_finished" not in names(first)
    paused = first[-1]
    run_id, task_id = paused["workflow_run_id"], paused["task_id"]
    assert paused["data"]["status"] == "paused"
    assert paused["data"]["paused_nodes"] == ["ask"]
    assert paused["data"]["reasons"] == [{"TYPE": "test_pause", "node_id": "ask"}]
    asked = next(e for e in first if e["event"] == "node_started" and e["data"]["node_id"] == "ask")

    store = open_store(location)
    try:
        record = store.checkpoint(run_id)
        assert record is not None and record.status == cp.PAUSED and record.owner is None
        assert store.run(run_id).status == "paused"  # what GET /v1/workflows/run/{id} shows
        assert [n.node_id for n in store.run(run_id).nodes] == ["start", "before"]
    finally:
        store.close()

    answer = {"ask": {"outputs": {"answer": "yes please"}, "handle": "yes"}}
    code, second = child("resume", location, doc, run_id, json.dumps(answer))
    assert code == 0
    assert {e["workflow_run_id"] for e in second} == {run_id}
    assert {e["task_id"] for e in second} == {task_id}
    # Positions go on where the paused stream ended.
    assert [e["position"] for e in second] == list(
        range(first[-1]["position"] + 1, first[-1]["position"] + 1 + len(second))
    )
    assert second[0]["event"] == "workflow_started"
    assert second[0]["data"]["reason"] == "resumption"
    finished_ask = second[1]
    assert finished_ask["event"] == "node_finished"
    assert finished_ask["data"]["id"] == asked["data"]["id"]  # the same node execution
    assert finished_ask["data"]["outputs"] == {"answer": "yes please"}
    ran = [e["data"]["node_id"] for e in second if e["event"] == "node_started"]
    assert ran == ["after", "end"]  # the yes branch; nothing before the pause again
    end = second[-1]
    assert names(second).count("workflow_finished") == 1
    assert end["event"] == "workflow_finished" and end["data"]["status"] == "succeeded"
    assert end["data"]["outputs"] == {"out": "before hi / yes please"}
    assert end["data"]["total_steps"] == 5

    store = open_store(location)
    try:
        assert store.checkpoint(run_id) is None
        recorded = store.run(run_id)
        assert recorded.status == "succeeded"
        assert [n.node_id for n in recorded.nodes] == ["start", "before", "ask", "after", "end"]
    finally:
        store.close()

    code, again = child("resume", location, doc, run_id, json.dumps(answer))
    assert code == 3 and again[0]["key"] == "errors.checkpoint.ended"
    assert "succeeded" in again[0]["refused"]


def test_the_chosen_handle_is_the_branch_taken(tmp_path: Path) -> None:
    location = str(tmp_path / "state.db")
    doc = write_doc(tmp_path, pausing_doc())
    _, first = child("run", location, doc, json.dumps({"q": "hi"}))
    run_id = first[-1]["workflow_run_id"]
    answer = {"ask": {"outputs": {"answer": "not now"}, "handle": "no"}}
    _, second = child("resume", location, doc, run_id, json.dumps(answer))
    ran = [e["data"]["node_id"] for e in second if e["event"] == "node_started"]
    assert ran == ["refused"]
    assert second[-1]["data"]["outputs"] == {"out": "not now"}


def test_a_changed_app_is_refused_by_its_graph_hash(tmp_path: Path) -> None:
    location = str(tmp_path / "state.db")
    _, first = child("run", location, write_doc(tmp_path, pausing_doc()), json.dumps({"q": "x"}))
    run_id = first[-1]["workflow_run_id"]
    changed = pausing_doc()
    changed["workflow"]["graph"]["nodes"][3]["data"]["template"] = "changed {{ a }}"
    answer = {"ask": {"outputs": {"answer": "y"}, "handle": "yes"}}
    code, out = child("resume", location, write_doc(tmp_path, changed, "v2.json"), run_id, "{}")
    assert code == 3 and out[0]["key"] == "errors.checkpoint.graphChanged"
    assert "changed since its checkpoint" in out[0]["refused"] and run_id in out[0]["refused"]
    # The refusal took nothing: the unchanged app still resumes it.
    code, out = child(
        "resume", location, write_doc(tmp_path, pausing_doc()), run_id, json.dumps(answer)
    )
    assert code == 0 and out[-1]["data"]["status"] == "succeeded"


def test_what_cannot_be_resumed_is_refused(tmp_path: Path) -> None:
    workflow = load_workflow(pausing_doc())
    store = open_store(tmp_path / "state.db")
    try:
        with RunResources.open(store=store, clients=object()) as resources:  # type: ignore[arg-type]
            with pytest.raises(cp.CheckpointError) as unknown:
                workflow.resume("no-such-run", RunOptions(), resources)
            assert unknown.value.message_key == "errors.checkpoint.unknownRun"
            run = workflow.run({"q": "a"}, RunOptions(), resources)
            events = list(run)
            assert isinstance(events[-1], ev.WorkflowPaused) and run.status == "paused"
            with pytest.raises(cp.CheckpointError) as wrong:
                workflow.resume(
                    run.run_id, RunOptions(), resources, resolved={"before": cp.Resolved()}
                )
            assert wrong.value.message_key == "errors.checkpoint.notPaused"
            # Taken by one process (a resume in flight): a second is refused.
            held = store.claim_checkpoint(
                run.run_id, owner="elsewhere:1:x", lease_seconds=60, statuses=(cp.PAUSED,)
            )
            assert held is not None and held.attempts == 1
            with pytest.raises(cp.CheckpointError) as busy:
                workflow.resume(run.run_id, RunOptions(), resources)
            assert busy.value.message_key == "errors.checkpoint.busy"
    finally:
        store.close()


def test_a_snapshot_resumes_in_process_without_a_store() -> None:
    workflow = load_workflow(pausing_doc())
    with RunResources.open(clients=object()) as resources:  # type: ignore[arg-type]
        run = workflow.run({"q": "a"}, RunOptions(), resources)
        first = list(run)
        assert run.status == "paused" and run.checkpoint is not None
        snapshot = cp.load(run.checkpoint.model_dump_json())  # through its wire form
        answer = cp.Resolved({"answer": "ok"}, "yes")
        again = workflow.resume(snapshot, RunOptions(), resources, resolved={"ask": answer})
        second = list(again)
    assert again.run_id == run.run_id and again.status == "succeeded"
    assert second[-1].outputs == {"out": "before a / ok"}
    assert again.position == len(first) + len(second)


def test_the_runs_totals_keep_their_files_across_a_pause(tmp_path: Path) -> None:
    """One branch ends (its end node's file goes into the run's outputs) while the
    other pauses: the checkpoint's totals hold a file, and the resumed run ends with it."""
    file = text_file(tmp_path / "notes.txt", "n1")
    start = [{"variable": "f", "type": "file", "allowed_file_types": ["document"]}]
    nodes = [
        node("start", "start", variables=start),
        node("early", "end", outputs=[{"variable": "doc", "value_selector": ["start", "f"]}]),
        node("ask", "test-pause", prompt="go on?"),
        node("late", "end", outputs=[{"variable": "out", "value_selector": ["ask", "answer"]}]),
    ]
    edges = [edge("start", "early"), edge("start", "ask"), edge("ask", "late", "yes")]
    graph = {"graph": {"nodes": nodes, "edges": edges}}
    workflow = load_workflow({"kind": "app", "app": {"mode": "workflow"}, "workflow": graph})
    options = RunOptions(durability=cp.Durability.NODE)
    store = open_store(tmp_path / "state.db")
    try:
        with RunResources.open(clients=object(), store=store) as resources:  # type: ignore[arg-type]
            run = workflow.run({"f": file}, options, resources)
            list(run)
            assert run.status == "paused"
            answer = cp.Resolved({"answer": "ok"}, "yes")
            again = workflow.resume(run.run_id, options, resources, resolved={"ask": answer})
            last = list(again)[-1]
    finally:
        store.close()
    assert again.status == "succeeded" and last.outputs["out"] == "ok"
    doc = last.outputs["doc"]  # a file again, as Dify shows one (not its fields as data)
    assert doc["dify_model_identity"] == "__dify__file__" and "path" not in doc
    assert (doc["filename"], doc["related_id"], doc["id"]) == ("notes.txt", "n1", file.id)


def test_snapshot_versions_are_checked_first() -> None:
    workflow = load_workflow(pausing_doc())
    with RunResources.open(clients=object()) as resources:  # type: ignore[arg-type]
        run = workflow.run({"q": "a"}, RunOptions(), resources)
        list(run)
    text = run.checkpoint.model_dump_json()
    data = json.loads(text)
    newer = copy.deepcopy(data) | {"version": cp.SNAPSHOT_VERSION + 1}
    with pytest.raises(cp.CheckpointError) as found:
        cp.load(json.dumps(newer))
    assert found.value.message_key == "errors.checkpoint.newer"
    older = copy.deepcopy(data) | {"version": 0}
    with pytest.raises(cp.CheckpointError) as found:
        cp.load(json.dumps(older))
    assert found.value.message_key == "errors.checkpoint.tooOld"
    broken = copy.deepcopy(data)
    del broken["frame"]["scheduler"]
    with pytest.raises(cp.CheckpointError) as found:
        cp.load(json.dumps(broken))
    assert found.value.message_key == "errors.checkpoint.unreadable"
    assert "scheduler" in str(found.value)
    with pytest.raises(cp.CheckpointError):
        cp.load("{not json")


def test_values_keep_their_files(tmp_path: Path) -> None:
    file = text_file(tmp_path / "doc.txt", "r1")
    value = {"files": [file, {"nested": (1, "two")}], "n": None}
    back = cp.decode(json.loads(json.dumps(cp.encode(value))))
    assert back == {"files": [file, {"nested": [1, "two"]}], "n": None}
    assert back["files"][0].path == file.path


def test_values_keep_what_json_has_no_word_for() -> None:
    """NaN, the infinities and integers past 64 bits come back as they were."""
    value = {"nan": float("nan"), "inf": float("inf"), "in": [1.5, -float("inf"), {"k": 3}]}
    back = cp.decode(json.loads(cp.dumps(cp.encode(value))))
    assert math.isnan(back.pop("nan"))
    assert back == {"inf": float("inf"), "in": [1.5, -float("inf"), {"k": 3}]}
    big = {"big": 2**70, "small": -(2**70)}
    assert cp.decode(json.loads(cp.dumps(cp.encode(big)))) == big
    tag_like = {"__firstgate_float__": "nan", "x": 1}  # not a tag: kept as it is
    assert cp.decode(cp.encode(tag_like)) == tag_like


def work_doc(
    count: int,
    gate_at: int | None = None,
    log: str = "",
    extra: dict[int, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """start -> w1 -> ... -> w<count> -> end, `test-work` nodes (one waiting on a
    gate; `extra` adds data to some)."""
    nodes = [node("start", "start", variables=[{"variable": "q", "type": "text-input"}])]
    edges = []
    previous = "start"
    for i in range(1, count + 1):
        data: dict[str, Any] = {"log": log, **(extra or {}).get(i, {})}
        if i == gate_at:
            data["gate"] = f"g{i}"
        nodes.append(node(f"w{i}", "test-work", **data))
        edges.append(edge(previous, f"w{i}"))
        previous = f"w{i}"
    last = [{"variable": "out", "value_selector": [previous, "output"]}]
    nodes.append(node("end", "end", outputs=last))
    edges.append(edge(previous, "end"))
    return {
        "kind": "app",
        "app": {"mode": "workflow", "name": "work"},
        "workflow": {"graph": {"nodes": nodes, "edges": edges}},
    }


def firstgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "firstgate.serve.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.mark.parametrize("durability", [cp.Durability.NODE, cp.Durability.BATCHED])
def test_a_running_run_shows_its_progress(tmp_path: Path, durability: cp.Durability) -> None:
    """Node executions are written as they finish: the store's run (what
    `GET /v1/workflows/run/{id}` answers) and `firstgate runs` show the progress."""
    state = tmp_path / "state.db"
    workflow = load_workflow(work_doc(3, gate_at=3))
    gate = pausing_node.GATES.setdefault("g3", threading.Event())
    gate.clear()
    store = open_store(state)
    options = RunOptions(durability=durability, durability_batch_ms=0)
    try:
        with RunResources.open(store=store, clients=object()) as resources:  # type: ignore[arg-type]
            run = workflow.run({"q": "a"}, options, resources)
            for event in run:
                if isinstance(event, ev.NodeStarted) and event.node_id == "w3":
                    break
            seen = store.run(run.run_id)
            assert seen is not None and seen.status == "running"
            assert seen.total_steps == 3  # start, w1, w2 finished before w3 started
            assert [n.node_id for n in seen.nodes] == ["start", "w1", "w2"]
            listed = firstgate("runs", "--state", str(state))
            assert listed.returncode == 0, listed.stderr
            assert run.run_id in listed.stdout and "running" in listed.stdout
            shown = firstgate("runs", run.run_id, "--state", str(state), "--json")
            lines = [json.loads(line) for line in shown.stdout.splitlines()]
            assert lines[0]["status"] == "running"
            assert [n["node"] for n in lines[1:]] == ["start", "w1", "w2"]
            gate.set()
            rest = list(run)
            assert isinstance(rest[-1], ev.WorkflowSucceeded)
            done = store.run(run.run_id)
            assert done.status == "succeeded" and len(done.nodes) == 5
            assert store.checkpoint(run.run_id) is None
    finally:
        gate.set()
        store.close()


def test_runs_lists_nothing_and_refuses_an_unknown_run(tmp_path: Path) -> None:
    state = str(tmp_path / "empty.db")
    listed = firstgate("runs", "--state", state)
    assert listed.returncode == 0 and "no runs in" in listed.stdout
    unknown = firstgate("runs", "nope", "--state", state)
    assert unknown.returncode == 2 and "no run nope" in unknown.stderr


def test_end_only_durability_writes_nothing_before_the_end(tmp_path: Path) -> None:
    workflow = load_workflow(work_doc(2, gate_at=2))
    gate = pausing_node.GATES.setdefault("g2", threading.Event())
    gate.clear()
    store = open_store(tmp_path / "state.db")
    try:
        with RunResources.open(store=store, clients=object()) as resources:  # type: ignore[arg-type]
            run = workflow.run({"q": "a"}, RunOptions(durability=cp.Durability.END), resources)
            for event in run:
                if isinstance(event, ev.NodeStarted) and event.node_id == "w2":
                    break
            assert store.run(run.run_id) is None and store.checkpoint(run.run_id) is None
            gate.set()
            assert isinstance(list(run)[-1], ev.WorkflowSucceeded)
            assert store.run(run.run_id).status == "succeeded"
    finally:
        gate.set()
        store.close()


def in_flight(location: str, run_id: str, node_id: str) -> bool:
    """Whether the run's stored checkpoint lists `node_id` among its running nodes."""
    store = open_store(location)
    try:
        record = store.checkpoint(run_id)
    finally:
        store.close()
    if record is None:
        return False

    def running(value: Any) -> bool:
        if isinstance(value, dict):
            listed = value.get("running")
            if isinstance(listed, list) and any(
                isinstance(item, dict) and item.get("node_id") == node_id for item in listed
            ):
                return True
            return any(running(item) for item in value.values())
        if isinstance(value, list):
            return any(running(item) for item in value)
        return False

    return running(json.loads(record.snapshot))


def killed_at(location: str, doc: str, node_id: str, log: Path) -> list[dict[str, Any]]:
    """Run `doc` in a child process with per-node durability and SIGKILL it once
    `node_id` is at work (its line is in `log`); the events it sent."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CHECKPOINT_DURABILITY": "node"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.checkpoint_child", "run", location, doc, '{"q": "a"}'],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    seen: list[dict[str, Any]] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            seen.append(json.loads(line))
            data = seen[-1].get("data", {})
            if seen[-1]["event"] == "node_started" and data.get("node_id") == node_id:
                break
        for _ in range(3000):  # its node_started goes out just before it runs
            if log.exists() and node_id in log.read_text(encoding="utf-8").split():
                break
            time.sleep(0.01)
        # The checkpoint that lists it in flight may still be committing while it
        # runs (under gevent the commit's socket wait lets the node go first):
        # kill once the store has it, so the kill is at the moment the test means.
        run_id = seen[0]["workflow_run_id"]
        for _ in range(3000):
            if in_flight(location, run_id, node_id):
                break
            time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()
    assert process.returncode == -signal.SIGKILL
    return seen


def test_a_killed_run_resumes_from_its_last_finished_node(tmp_path: Path, location: str) -> None:
    """SIGKILL while w3 runs: another process resumes the run; w1 and w2 (finished)
    are not run again, w3 (in flight) is: at least once for it, exactly once for them."""
    log, release = tmp_path / "ran.log", tmp_path / "go"
    doc = write_doc(tmp_path, work_doc(4, log=str(log), extra={3: {"wait_file": str(release)}}))
    first = killed_at(location, doc, "w3", log)
    run_id = first[0]["workflow_run_id"]
    store = open_store(location)
    try:
        record = store.checkpoint(run_id)
        assert record is not None and record.status == cp.RUNNING
        assert store.run(run_id).status == "running"
    finally:
        store.close()
    release.write_text("", encoding="utf-8")
    code, second = child("resume", location, doc, run_id, "{}")
    assert code == 0
    ran = [e["data"]["node_id"] for e in second if e["event"] == "node_started"]
    assert ran == ["w3", "w4", "end"]
    assert log.read_text(encoding="utf-8").split() == ["w1", "w2", "w3", "w3", "w4"]
    # The dispatcher wrote a checkpoint before it waited for w3: w3 was in flight,
    # and runs again under its own execution id; positions go on from there.
    assert first[-1]["data"]["node_id"] == "w3"
    assert second[1]["data"]["node_id"] == "w3" and second[1]["data"]["index"] == 4
    assert second[1]["data"]["id"] == first[-1]["data"]["id"]
    assert second[0]["position"] == first[-1]["position"] + 1
    assert names(second).count("workflow_finished") == 1
    assert second[-1]["data"]["status"] == "succeeded"
    assert second[-1]["data"]["outputs"] == {"out": "w4"}
    store = open_store(location)
    try:
        assert store.run(run_id).status == "succeeded"
        assert [n.node_id for n in store.run(run_id).nodes] == [
            "start", "w1", "w2", "w3", "w4", "end"
        ]  # fmt: skip
        assert store.checkpoint(run_id) is None
    finally:
        store.close()


def test_a_node_unsafe_to_repeat_fails_the_resumed_run(tmp_path: Path) -> None:
    location = str(tmp_path / "state.db")
    log, release = tmp_path / "ran.log", tmp_path / "go"
    unsafe = {"wait_file": str(release), "repeatable": False}
    doc = write_doc(tmp_path, work_doc(3, log=str(log), extra={2: unsafe}))
    first = killed_at(location, doc, "w2", log)
    run_id = first[0]["workflow_run_id"]
    release.write_text("", encoding="utf-8")
    code, second = child("resume", location, doc, run_id, "{}")
    assert code == 0
    assert log.read_text(encoding="utf-8").split() == ["w1", "w2"]  # w2 was not repeated
    failed = next(e for e in second if e["event"] == "node_finished")
    assert failed["data"]["node_id"] == "w2" and failed["data"]["status"] == "failed"
    assert failed["data"]["id"] == first[-1]["data"]["id"]  # the execution that was cut
    assert "unsafe to run twice" in failed["data"]["error"]
    end = second[-1]
    assert end["event"] == "workflow_finished" and end["data"]["status"] == "failed"
    assert "w2" in end["data"]["error"] and run_id in end["data"]["error"]
    store = open_store(location)
    try:
        assert store.run(run_id).status == "failed" and store.checkpoint(run_id) is None
    finally:
        store.close()


def test_an_ended_run_stays_ended_whoever_writes_later(tmp_path: Path, location: str) -> None:
    """A process that lost its hold on a run (it hung; another ended the run) can
    neither checkpoint it again nor record another end over the first."""
    workflow = load_workflow(work_doc(2, gate_at=2))
    gate = pausing_node.GATES.setdefault("g2", threading.Event())
    gate.clear()
    store = open_store(location)
    options = RunOptions(durability=cp.Durability.NODE)
    try:
        with RunResources.open(store=store, clients=object()) as resources:  # type: ignore[arg-type]
            run = workflow.run({"q": "a"}, options, resources)
            for event in run:
                if isinstance(event, ev.NodeStarted) and event.node_id == "w2":
                    break
            running = store.run(run.run_id)
            assert running.status == "running"
            # Someone else ends it (a reaper): failed.
            store.record_run(
                dataclasses.replace(running, status="failed", error="lost", nodes=(), files=())
            )
            gate.set()
            rest = list(run)  # w2 ends: its checkpoint is refused, the run fails here
            assert isinstance(rest[-1], ev.WorkflowFailed)
            assert "has already ended" in rest[-1].error_message
            kept = store.run(run.run_id)
            assert kept.status == "failed" and kept.error == "lost"
            assert store.checkpoint(run.run_id) is None
    finally:
        gate.set()
        store.close()


def test_a_checkpoint_never_holds_the_environments_secrets(tmp_path: Path) -> None:
    """The environment is resolved again by the resumed run; no secret is stored."""
    doc = pausing_doc()
    doc["workflow"]["environment_variables"] = [
        {"name": "token", "value_type": "secret", "value": "", "id": "e1"}
    ]
    secret = "s3cr3t-value-0123456789"
    workflow = load_workflow(doc)
    store = open_store(tmp_path / "state.db")
    options = RunOptions(environ={"FIRSTGATE_ENV_token": secret})
    try:
        with RunResources.open(store=store, clients=object()) as resources:  # type: ignore[arg-type]
            run = workflow.run({"q": "a"}, options, resources)
            list(run)
            assert run.session.environment == {"token": secret}  # the run had it
            record = store.checkpoint(run.run_id)
            assert record is not None
            assert secret not in record.snapshot
            assert all(secret not in part for part in record.parts.values())
            answer = {"ask": cp.Resolved({"answer": "ok"}, "yes")}
            again = workflow.resume(run.run_id, options, resources, resolved=answer)
            list(again)
            assert again.status == "succeeded"
    finally:
        store.close()


def test_a_finished_nodes_outputs_are_stored_once(tmp_path: Path, location: str) -> None:
    """A node whose execution record holds its outputs as they are has its record
    marked (no part); one whose record masks a secret keeps its outputs whole in
    a part, so that the resumed run reads what the node really said."""
    doc = pausing_doc()
    doc["workflow"]["environment_variables"] = [
        {"name": "token", "value_type": "secret", "value": "", "id": "e1"}
    ]
    graph = doc["workflow"]["graph"]
    graph["nodes"].insert(2, template("masked", "key {{ t }}", t=["env", "token"]))
    graph["nodes"][4] = template(
        "after",
        "{{ b }} / {{ m }} / {{ a }}",
        b=["before", "output"],
        m=["masked", "output"],
        a=["ask", "answer"],
    )
    graph["edges"][1] = edge("before", "masked")
    graph["edges"].insert(2, edge("masked", "ask"))
    secret = "s3cr3t-value-0123456789"
    workflow = load_workflow(doc)
    store = open_store(location)
    options = RunOptions(environ={"FIRSTGATE_ENV_token": secret}, durability=cp.Durability.NODE)
    try:
        with RunResources.open(store=store, clients=object()) as resources:  # type: ignore[arg-type]
            run = workflow.run({"q": "a"}, options, resources)
            list(run)
            record = store.checkpoint(run.run_id)
            assert record is not None
            executions = {n.node_id: n for n in store.run(run.run_id).nodes}
            assert record.held["before"] == executions["before"].id
            assert "record:before" not in record.parts
            row = store.checkpoint(run.run_id, whole=False)  # the head alone: no parts read
            assert row is not None and row.snapshot == record.snapshot
            assert not row.held and not row.parts
            assert executions["before"].outputs == {"output": "before a"}
            assert "outputs:before" not in record.parts
            assert secret not in json.dumps(executions["masked"].outputs)  # masked there
            assert json.loads(record.parts["outputs:masked"]) == {"output": f"key {secret}"}
            answer = {"ask": cp.Resolved({"answer": "ok"}, "yes")}
            again = workflow.resume(run.run_id, options, resources, resolved=answer)
            list(again)
            assert again.status == "succeeded"
            assert again.outputs == {"out": f"before a / key {secret} / ok"}
    finally:
        store.close()


def test_a_checkpoint_naming_its_executions_in_parts_still_resumes(tmp_path: Path) -> None:
    """A checkpoint written before node executions were marked (schema 7) named
    each one in a `record:<node>` part: it is read as it was written."""
    import sqlite3

    location = str(tmp_path / "state.db")
    workflow = load_workflow(pausing_doc())
    options = RunOptions(durability=cp.Durability.NODE)
    store = open_store(location)
    try:
        with RunResources.open(store=store, clients=object()) as resources:  # type: ignore[arg-type]
            run = workflow.run({"q": "a"}, options, resources)
            list(run)
            assert run.status == "paused"
            db = sqlite3.connect(location, isolation_level=None)
            try:  # the marks made into the parts an earlier firstgate wrote
                marked = db.execute(
                    "SELECT node_id, id FROM node_executions "
                    "WHERE workflow_run_id = ? AND checkpoint_outputs = 1",
                    (run.run_id,),
                ).fetchall()
                assert [n for n, _ in marked] == ["start", "before"]
                db.executemany(
                    "INSERT INTO run_checkpoint_parts (run_id, part, value) VALUES (?, ?, ?)",
                    [(run.run_id, f"record:{n}", i) for n, i in marked],
                )
                db.execute("UPDATE node_executions SET checkpoint_outputs = 0")
            finally:
                db.close()
            record = store.checkpoint(run.run_id)
            assert record is not None and not record.held
            answer = {"ask": cp.Resolved({"answer": "ok"}, "yes")}
            again = workflow.resume(run.run_id, options, resources, resolved=answer)
            list(again)
            assert again.status == "succeeded"
            assert again.outputs == {"out": "before a / ok"}
    finally:
        store.close()


def test_a_node_made_ready_before_the_kill_starts_on_resume(tmp_path: Path) -> None:
    """The checkpoint of w2's end (its row due: w2 took longer than the progress
    period, so the dispatcher writes nothing more before it waits) lists w3 as
    ready; killed while w3 runs, the resumed run starts w3 anew."""
    location = str(tmp_path / "state.db")
    log, release = tmp_path / "ran.log", tmp_path / "go"
    slow = {"sleep_ms": int(cp.PROGRESS_S * 1000) + 150}
    doc = write_doc(
        tmp_path, work_doc(4, log=str(log), extra={2: slow, 3: {"wait_file": str(release)}})
    )
    first = killed_at(location, doc, "w3", log)
    release.write_text("", encoding="utf-8")
    code, second = child("resume", location, doc, first[0]["workflow_run_id"], "{}")
    assert code == 0
    ran = [e["data"]["node_id"] for e in second if e["event"] == "node_started"]
    assert ran == ["w3", "w4", "end"]
    assert second[1]["data"]["id"] != first[-1]["data"]["id"]  # started anew: it was ready
    assert log.read_text(encoding="utf-8").split() == ["w1", "w2", "w3", "w3", "w4"]
    assert second[-1]["data"]["status"] == "succeeded"


def test_an_unsafe_node_is_durable_before_it_runs_even_when_batched(tmp_path: Path) -> None:
    """However rare the batch's commits, a node unsafe to repeat starts only after
    a checkpoint that lists it in flight."""
    log = tmp_path / "ran.log"
    unsafe = {"repeatable": False, "gate": "unsafe2"}
    workflow = load_workflow(work_doc(3, log=str(log), extra={2: unsafe}))
    gate = pausing_node.GATES.setdefault("unsafe2", threading.Event())
    gate.clear()
    store = open_store(tmp_path / "state.db")
    options = RunOptions(durability=cp.Durability.BATCHED, durability_batch_ms=60_000)
    try:
        with RunResources.open(store=store, clients=object()) as resources:  # type: ignore[arg-type]
            run = workflow.run({"q": "a"}, options, resources)
            events: list[ev.Event] = []
            reader = threading.Thread(target=lambda: events.extend(run))
            reader.start()
            for _ in range(3000):  # w2 is at work (its worker wrote its line)
                if log.exists() and "w2" in log.read_text(encoding="utf-8").split():
                    break
                time.sleep(0.01)
            record = store.checkpoint(run.run_id)
            assert record is not None, "the unsafe node runs with no checkpoint"
            running = json.loads(record.snapshot)["frame"]["running"]
            assert [r["node_id"] for r in running] == ["w2"]
            gate.set()
            reader.join(timeout=60)
            assert isinstance(events[-1], ev.WorkflowSucceeded)
    finally:
        gate.set()
        store.close()
