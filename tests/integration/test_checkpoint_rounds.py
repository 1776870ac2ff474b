"""Containers mid-round in a checkpoint (snapshot version 2), over real stores:
a loop or an iteration (sequential, parallel) killed mid-container goes on in
another process from its first unfinished round (what its finished rounds made
comes from the checkpoint, nothing of them runs again), a pause inside a round
pauses the run and the round goes on where it paused, and a version 1
snapshot is migrated (its containers run again from their first round).

Rounds are counted with `test-work` nodes (`tests/fakes/pausing_node.py`),
which append `<node>:<round's value>` to a log file shared across processes."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from firstgate.runtime import RunOptions, RunResources, load_workflow
from firstgate.runtime.execution import checkpoint as cp
from firstgate.runtime.execution import events as ev
from firstgate.store import open_store

from tests.fakes import pausing_node
from tests.integration.test_checkpoints import ROOT, child, names, write_doc
from tests.integration.test_cli import firstgate
from tests.postgres_support import postgres_server, postgres_url  # noqa: F401 - fixtures


@pytest.fixture(autouse=True)
def _pausing_node() -> Iterator[None]:
    with pausing_node.registered():
        yield


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    return request.getfixturevalue("postgres_url")


def node(node_id: str, node_type: str, parent: str | None = None, **data: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"id": node_id, "data": {"type": node_type, "title": node_id, **data}}
    if parent is not None:
        found["parentId"] = parent
    return found


def edge(source: str, target: str, handle: str = "source") -> dict[str, Any]:
    return {"source": source, "target": target, "sourceHandle": handle}


def app(
    nodes: list[dict[str, Any]], edges: list[dict[str, Any]], items: list[str] | None = None
) -> dict[str, Any]:
    start = node("start", "start", variables=[{"variable": "q", "type": "text-input"}])
    listed = [{"name": "items", "value_type": "array[string]", "value": items, "id": "items"}]
    return {
        "kind": "app",
        "app": {"mode": "workflow", "name": "rounds"},
        "workflow": {
            "conversation_variables": listed if items is not None else [],
            "graph": {"nodes": [start, *nodes], "edges": edges},
        },
    }


def number(label: str, value: Any = 0) -> dict[str, Any]:
    return {"label": label, "var_type": "number", "value_type": "constant", "value": value}


def assign(node_id: str, parent: str, target: list[str], operation: str, value: Any) -> dict:
    kind = "variable" if isinstance(value, list) else "constant"
    item = {"variable_selector": target, "operation": operation, "value": value, "input_type": kind}
    return node(node_id, "assigner", parent, version="2", items=[item])


def loop_doc(
    log: Path, release: Path, rounds: int = 5, wait_at: int = 2, pre: bool = False, **work: Any
) -> dict[str, Any]:
    """start -> lp (n from 0, `rounds` rounds: [pre (a template) ->] w (logs
    `w:<n>`, waits for `release` in round `wait_at`) -> inc (n += 1)) -> end (n,
    rounds)."""
    wait = {"tag": ["lp", "n"], "wait_at": str(wait_at), "wait_file": str(release), **work}
    nodes = [
        node(
            "lp",
            "loop",
            loop_count=rounds,
            loop_variables=[number("n")],
            start_node_id="lpstart",
            logical_operator="and",
        ),
        node("lpstart", "loop-start", "lp"),
        node("w", "test-work", "lp", log=str(log), **wait),
        assign("inc", "lp", ["lp", "n"], "+=", 1),
        node(
            "end",
            "end",
            outputs=[
                {"variable": "n", "value_selector": ["lp", "n"]},
                {"variable": "rounds", "value_selector": ["lp", "loop_round"]},
            ],
        ),
    ]
    edges = [edge("start", "lp"), edge("lpstart", "w"), edge("w", "inc"), edge("lp", "end")]
    if pre:  # w is not the round's first node: it starts after the round's checkpoint
        nodes.append(node("pre", "template-transform", "lp", template="-", variables=[]))
        edges[1:2] = [edge("lpstart", "pre"), edge("pre", "w")]
    return app(nodes, edges)


def iteration_doc(
    log: Path,
    release: Path,
    items: list[str],
    wait_at: str,
    width: int = 1,
    work: dict[str, Any] | None = None,
    **data: Any,
) -> dict[str, Any]:
    """start -> it (over `items`, `width` rounds at once: w (logs `w:<item>`, waits
    for `release` at item `wait_at`; `work`: more of its data) -> say (`<item>!`))
    -> end (the outputs)."""
    wait = {"tag": ["it", "item"], "wait_at": wait_at, "wait_file": str(release), **(work or {})}
    nodes = [
        node(
            "it",
            "iteration",
            iterator_selector=["conversation", "items"],
            output_selector=["say", "output"],
            start_node_id="itstart",
            is_parallel=width > 1,
            parallel_nums=width,
            **data,
        ),
        node("itstart", "iteration-start", "it"),
        node("w", "test-work", "it", log=str(log), **wait),
        node(
            "say",
            "template-transform",
            "it",
            template="{{ x }}!",
            variables=[{"variable": "x", "value_selector": ["it", "item"]}],
        ),
        node("end", "end", outputs=[{"variable": "out", "value_selector": ["it", "output"]}]),
    ]
    edges = [edge("start", "it"), edge("itstart", "w"), edge("w", "say"), edge("it", "end")]
    return app(nodes, edges, items)


def ran(log: Path) -> Counter[str]:
    return Counter(log.read_text(encoding="utf-8").split()) if log.exists() else Counter()


def stored(location: str, run_id: str) -> dict[str, Any] | None:
    """The run's latest checkpoint's head, as it is in the store."""
    store = open_store(location)
    try:
        record = store.checkpoint(run_id)
    finally:
        store.close()
    return json.loads(record.snapshot) if record is not None else None


def container_of(head: dict[str, Any] | None, node_id: str) -> dict[str, Any] | None:
    if head is None:
        return None
    found = [c for c in head["frame"]["containers"] if c["execution"]["node_id"] == node_id]
    return found[0] if found else None


def killed_when(
    location: str, doc: str, ready: Callable[[dict[str, Any] | None], bool], **durability: str
) -> list[dict[str, Any]]:
    """Run `doc` in a child process (per-node durability unless `durability` says
    otherwise: CHECKPOINT_* variables) and SIGKILL it once its stored checkpoint
    is `ready`; the events it sent."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CHECKPOINT_DURABILITY": "node", **durability}
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
        seen.append(json.loads(process.stdout.readline()))  # workflow_started: the run id
        run_id = seen[0]["workflow_run_id"]
        for _ in range(3000):
            if ready(stored(location, run_id)):
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the checkpoint never got there")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        if process.stdout is not None:
            seen.extend(json.loads(line) for line in process.stdout.read().splitlines() if line)
            process.stdout.close()
    assert process.returncode == -signal.SIGKILL
    return seen


def uninterrupted(doc: dict[str, Any]) -> dict[str, Any]:
    """The outputs of the same app run once, start to end, in this process."""
    with RunResources.open(clients=object()) as resources:  # type: ignore[arg-type]
        events = list(load_workflow(doc).run({"q": "a"}, RunOptions(), resources))
    assert isinstance(events[-1], ev.WorkflowSucceeded)
    return dict(events[-1].outputs)


def round_of(event: dict[str, Any], kind: str) -> int | None:
    data = event["data"]
    metadata = data.get("execution_metadata") or {}
    return data.get(f"{kind}_index", metadata.get(f"{kind}_index"))


def finished(events: list[dict[str, Any]], node_id: str, kind: str) -> list[int | None]:
    """The rounds in which `node_id` finished, in order (Dify's `node_finished`
    names its round in its execution metadata; `node_started` does not)."""
    return [
        round_of(e, kind)
        for e in events
        if e["event"] == "node_finished" and e["data"]["node_id"] == node_id
    ]


# ---- killed mid-container: finished rounds are not run again


def test_a_killed_loop_goes_on_from_its_first_unfinished_round(
    tmp_path: Path, location: str
) -> None:
    log, release = tmp_path / "ran.log", tmp_path / "go"
    doc_data = loop_doc(log, release)
    doc = write_doc(tmp_path, doc_data)

    def round_2_at_work(head: dict[str, Any] | None) -> bool:
        lp = container_of(head, "lp")
        return (
            lp is not None
            and lp["progress"] is not None
            and lp["progress"]["rounds"] == 2
            and "w:2" in ran(log)
        )

    first = killed_when(location, doc, round_2_at_work)
    run_id = first[0]["workflow_run_id"]
    lp = container_of(stored(location, run_id), "lp")
    assert lp is not None and [f["index"] for f in lp["frames"]] == [2]
    assert lp["variables"] == {"n": 2} and lp["progress"]["values"] == {"n": 2}
    release.write_text("", encoding="utf-8")
    code, second = child("resume", location, doc, run_id, "{}")
    assert code == 0
    # Rounds 0 and 1 finished: not again; round 2 was in flight: once more (its w).
    assert ran(log) == Counter({"w:0": 1, "w:1": 1, "w:2": 2, "w:3": 1, "w:4": 1})
    assert "loop_started" not in names(second)  # the container's start went out before
    assert finished(second, "w", "loop") == [2, 3, 4]
    assert finished(second, "inc", "loop") == [2, 3, 4]
    assert [e["data"]["index"] for e in second if e["event"] == "loop_next"] == [3, 4]
    loop_started = next(e for e in first if e["event"] == "loop_started")
    completed = next(e for e in second if e["event"] == "loop_completed")
    assert completed["data"]["id"] == loop_started["data"]["id"]
    assert completed["data"]["steps"] == 5
    durations = completed["data"]["execution_metadata"]["loop_duration_map"]
    assert sorted(durations) == ["0", "1", "2", "3", "4"]
    assert second[-1]["event"] == "workflow_finished"
    assert second[-1]["data"]["status"] == "succeeded"
    assert second[-1]["data"]["outputs"] == uninterrupted(doc_data) == {"n": 5, "rounds": 5}


@pytest.mark.parametrize("width", [1, 2])
def test_a_killed_iteration_runs_none_of_its_finished_rounds_again(
    tmp_path: Path, location: str, width: int
) -> None:
    """Sequential: a, b finished, c in flight. Parallel (2 at once): a, b, d, e
    finished around c, which is still in flight: rounds finish out of order."""
    log, release = tmp_path / "ran.log", tmp_path / "go"
    items = ["a", "b", "c", "d", "e"]
    doc_data = iteration_doc(log, release, items, "c", width)
    doc = write_doc(tmp_path, doc_data)
    done = [0, 1] if width == 1 else [0, 1, 3, 4]

    def c_in_flight(head: dict[str, Any] | None) -> bool:
        it = container_of(head, "it")
        return (
            it is not None
            and it["progress"] is not None
            and it["progress"]["done"] == done
            and "w:c" in ran(log)
        )

    first = killed_when(location, doc, c_in_flight)
    run_id = first[0]["workflow_run_id"]
    it = container_of(stored(location, run_id), "it")
    assert it is not None and [f["index"] for f in it["frames"]] == [2]
    release.write_text("", encoding="utf-8")
    code, second = child("resume", location, doc, run_id, "{}")
    assert code == 0
    assert ran(log) == Counter({"w:a": 1, "w:b": 1, "w:c": 2, "w:d": 1, "w:e": 1})
    assert "iteration_started" not in names(second)
    again = [2] if width == 2 else [2, 3, 4]
    assert finished(second, "w", "iteration") == again
    assert finished(second, "say", "iteration") == again
    assert [e["data"]["index"] for e in second if e["event"] == "iteration_next"] == again[1:]
    completed = next(e for e in second if e["event"] == "iteration_completed")
    assert completed["data"]["steps"] == 5
    durations = completed["data"]["execution_metadata"]["iteration_duration_map"]
    assert sorted(durations) == ["0", "1", "2", "3", "4"]
    assert second[-1]["data"]["status"] == "succeeded"
    out = second[-1]["data"]["outputs"]
    assert out == uninterrupted(doc_data) == {"out": ["a!", "b!", "c!", "d!", "e!"]}


@pytest.mark.parametrize("container", ["loop", "iteration"])
def test_an_unsafe_node_in_a_round_in_flight_fails_the_resumed_run(
    tmp_path: Path, container: str
) -> None:
    """Batched with a period longer than the test: the only checkpoints are the
    ones written before each start of w (unsafe to repeat), in every round. The
    iteration goes on past a failed round (continue-on-error): the run fails all
    the same, it does not repeat w nor leave its item out."""
    location = str(tmp_path / "state.db")
    log, release = tmp_path / "ran.log", tmp_path / "go"
    if container == "loop":
        doc_data, kind, at = loop_doc(log, release, pre=True, repeatable=False), "lp", "w:2"
    else:
        unsafe = {"repeatable": False}
        doc_data = iteration_doc(
            log, release, ["0", "1", "2", "3"], "2", work=unsafe,
            error_handle_mode="continue-on-error",
        )  # fmt: skip
        kind, at = "it", "w:2"
    doc = write_doc(tmp_path, doc_data)

    def round_2_unsafe_in_flight(head: dict[str, Any] | None) -> bool:
        found = container_of(head, kind)
        if found is None or at not in ran(log):
            return False
        frames = [f for f in found["frames"] if f["index"] == 2]
        return any(r["node_id"] == "w" for f in frames for r in f["running"])

    batched = {"CHECKPOINT_DURABILITY": "batched", "CHECKPOINT_BATCH_MS": "600000"}
    first = killed_when(location, doc, round_2_unsafe_in_flight, **batched)
    run_id = first[0]["workflow_run_id"]
    release.write_text("", encoding="utf-8")
    code, second = child("resume", location, doc, run_id, "{}")
    assert code == 0
    assert ran(log) == Counter({"w:0": 1, "w:1": 1, "w:2": 1})  # never twice
    failed = next(e for e in second if e["event"] == "node_finished")
    assert failed["data"]["node_id"] == "w" and failed["data"]["status"] == "failed"
    assert round_of(failed, "loop" if container == "loop" else "iteration") == 2
    assert "unsafe to run twice" in failed["data"]["error"]
    assert second[-1]["event"] == "workflow_finished"
    assert second[-1]["data"]["status"] == "failed"
    assert "unsafe to run twice" in second[-1]["data"]["error"]


# ---- a pause inside a round


def asking_loop_doc(log: Path) -> dict[str, Any]:
    """start -> lp (3 rounds; n from 0, said ""): w (logs `w:<n>`) -> check: in
    round 1 ask (pauses) -yes-> note (said = the answer) -> inc; otherwise inc
    (n += 1)) -> end (n, said, rounds)."""
    condition = {"variable_selector": ["lp", "n"], "comparison_operator": "=", "value": "1"}
    said = {"label": "said", "var_type": "string", "value_type": "constant", "value": ""}
    nodes = [
        node(
            "lp",
            "loop",
            loop_count=3,
            loop_variables=[number("n"), said],
            start_node_id="lpstart",
            logical_operator="and",
        ),
        node("lpstart", "loop-start", "lp"),
        node("w", "test-work", "lp", log=str(log), tag=["lp", "n"]),
        node("check", "if-else", "lp", cases=[{"case_id": "ask", "conditions": [condition]}]),
        node("ask", "test-pause", "lp", prompt="go on?"),
        assign("note", "lp", ["lp", "said"], "over-write", ["ask", "answer"]),
        assign("inc", "lp", ["lp", "n"], "+=", 1),
        node(
            "end",
            "end",
            outputs=[
                {"variable": "n", "value_selector": ["lp", "n"]},
                {"variable": "said", "value_selector": ["lp", "said"]},
                {"variable": "rounds", "value_selector": ["lp", "loop_round"]},
            ],
        ),
    ]
    edges = [
        edge("start", "lp"),
        edge("lpstart", "w"),
        edge("w", "check"),
        edge("check", "ask", "ask"),
        edge("ask", "note", "yes"),
        edge("note", "inc"),
        edge("check", "inc", "false"),
        edge("lp", "end"),
    ]
    return app(nodes, edges)


def test_a_pause_inside_a_loop_round_resumes_that_round_then_the_rest(
    tmp_path: Path, location: str
) -> None:
    log = tmp_path / "ran.log"
    doc = write_doc(tmp_path, asking_loop_doc(log))
    code, first = child("run", location, doc, '{"q": "a"}')
    assert code == 0
    assert names(first)[-2:] == ["test_pause_required", "workflow_paused"]
    paused = first[-1]
    assert paused["data"]["paused_nodes"] == ["ask"]
    run_id = paused["workflow_run_id"]
    store = open_store(location)
    try:
        record = store.checkpoint(run_id)
        assert record is not None and record.status == cp.PAUSED
        assert store.run(run_id).status == "paused"
    finally:
        store.close()
    lp = container_of(stored(location, run_id), "lp")
    assert lp is not None and lp["progress"]["rounds"] == 1
    (frame,) = lp["frames"]
    assert frame["index"] == 1 and [p["execution"]["node_id"] for p in frame["paused"]] == ["ask"]
    assert {"w", "check"} <= set(frame["values"])  # what finished in the round is kept
    asked = next(e for e in first if e["event"] == "node_started" and e["data"]["node_id"] == "ask")
    assert asked["data"]["loop_id"] == "lp"

    answer = {"ask": {"outputs": {"answer": "yes please"}, "handle": "yes"}}
    code, second = child("resume", location, doc, run_id, json.dumps(answer))
    assert code == 0
    assert ran(log) == Counter({"w:0": 1, "w:1": 1, "w:2": 1})  # round 1's w ran once
    finished_ask = second[1]
    assert finished_ask["event"] == "node_finished"
    assert finished_ask["data"]["id"] == asked["data"]["id"]
    assert round_of(finished_ask, "loop") == 1
    assert finished(second, "note", "loop") == [1]
    assert finished(second, "inc", "loop") == [1, 2]
    assert finished(second, "w", "loop") == [2]
    assert [e["data"]["index"] for e in second if e["event"] == "loop_next"] == [2]
    assert "loop_started" not in names(second)
    end = second[-1]
    assert end["data"]["status"] == "succeeded"
    assert end["data"]["outputs"] == {"n": 3, "said": "yes please", "rounds": 3}
    store = open_store(location)
    try:
        assert store.checkpoint(run_id) is None
        assert store.run(run_id).status == "succeeded"
    finally:
        store.close()


def asking_iteration_doc(width: int) -> dict[str, Any]:
    """start -> it (over a, b, c: in round b ask (pauses) -yes-> say
    (`<item>:<answer>`); the other rounds plain (`<item>`)) -> end."""
    condition = {"variable_selector": ["it", "item"], "comparison_operator": "is", "value": "b"}
    nodes = [
        node(
            "it",
            "iteration",
            iterator_selector=["conversation", "items"],
            output_selector=["join", "output"],
            start_node_id="itstart",
            is_parallel=width > 1,
            parallel_nums=width,
        ),
        node("itstart", "iteration-start", "it"),
        node("check", "if-else", "it", cases=[{"case_id": "ask", "conditions": [condition]}]),
        node("ask", "test-pause", "it", prompt="b?"),
        node(
            "say",
            "template-transform",
            "it",
            template="{{ x }}:{{ a }}",
            variables=[
                {"variable": "x", "value_selector": ["it", "item"]},
                {"variable": "a", "value_selector": ["ask", "answer"]},
            ],
        ),
        node(
            "plain",
            "template-transform",
            "it",
            template="{{ x }}",
            variables=[{"variable": "x", "value_selector": ["it", "item"]}],
        ),
        node(
            "join",
            "variable-aggregator",
            "it",
            output_type="string",
            variables=[["say", "output"], ["plain", "output"]],
        ),
        node("end", "end", outputs=[{"variable": "out", "value_selector": ["it", "output"]}]),
    ]
    edges = [
        edge("start", "it"),
        edge("itstart", "check"),
        edge("check", "ask", "ask"),
        edge("check", "plain", "false"),
        edge("ask", "say", "yes"),
        edge("say", "join"),
        edge("plain", "join"),
        edge("it", "end"),
    ]
    return app(nodes, edges, ["a", "b", "c"])


def test_a_pause_inside_a_sequential_iteration_round_resumes_in_process() -> None:
    workflow = load_workflow(asking_iteration_doc(1))
    with RunResources.open(clients=object()) as resources:  # type: ignore[arg-type]
        run = workflow.run({"q": "a"}, RunOptions(), resources)
        first = list(run)
        assert run.status == "paused" and run.checkpoint is not None
        assert run.checkpoint.status == cp.PAUSED and run.checkpoint.paused_nodes() == ["ask"]
        snapshot = cp.load(run.checkpoint.model_dump_json())  # through its wire form
        answer = cp.Resolved({"answer": "yes"}, "yes")
        again = workflow.resume(snapshot, RunOptions(), resources, resolved={"ask": answer})
        second = list(again)
    assert again.status == "succeeded"
    assert second[-1].outputs == {"out": ["a", "b:yes", "c"]}
    plain = [e for e in [*first, *second] if isinstance(e, ev.NodeStarted) and e.node_id == "plain"]
    assert [e.container.index for e in plain if e.container is not None] == [0, 2]
    assert [e.index for e in second if isinstance(e, ev.ContainerNext)] == [2]


def test_a_pause_inside_a_parallel_iteration_is_refused_by_name() -> None:
    workflow = load_workflow(asking_iteration_doc(2))
    with RunResources.open(clients=object()) as resources:  # type: ignore[arg-type]
        events = list(workflow.run({"q": "a"}, RunOptions(), resources))
    failed = [e for e in events if isinstance(e, ev.NodeFinished) and e.node_id == "ask"]
    assert failed and failed[0].status == "failed"
    assert "ask" in str(failed[0].error_message) and "parallel" in str(failed[0].error_message)
    assert events[-1].status == "failed"


# ---- version 1


def as_version_1(data: dict[str, Any]) -> dict[str, Any]:
    """A version 2 snapshot's data as version 1 wrote it: its containers with their
    round count, round index and variables, nothing of their rounds."""
    old = copy.deepcopy(data)
    old["version"] = 1
    frame = old["frame"]
    for key in ("index", "error", "broke"):
        frame.pop(key, None)
    for found in frame["containers"]:
        for key in ("tokens", "progress", "frames"):
            found.pop(key, None)
    return old


def test_a_version_1_snapshot_is_migrated_its_containers_run_from_their_first_round(
    tmp_path: Path,
) -> None:
    log, release = tmp_path / "ran.log", tmp_path / "go"
    workflow = load_workflow(loop_doc(log, release, wait_at=-1))  # no round waits
    with RunResources.open(clients=object()) as resources:  # type: ignore[arg-type]
        run = workflow.run({"q": "a"}, RunOptions(), resources)
        for event in run:  # a snapshot while round 2's w runs; then the run is dropped
            if isinstance(event, ev.NodeStarted) and event.node_id == "w":
                if event.container is not None and event.container.index == 2:
                    break
        data = run.snapshot().model_dump(mode="json")
        run.close()
        (lp,) = data["frame"]["containers"]
        assert data["version"] == 2 and lp["progress"]["rounds"] == 2
        text = json.dumps(as_version_1(data))
        # Read as if it were version 2, it does not validate: it is never misread.
        with pytest.raises(cp.CheckpointError) as unread:
            cp.load(text.replace('"version": 1', '"version": 2', 1))
        assert unread.value.message_key == "errors.checkpoint.unreadable"
        assert "progress" in str(unread.value)
        migrated = cp.load(text)
        assert migrated.version == cp.SNAPSHOT_VERSION == 2
        (state,) = migrated.frame.containers
        assert state.progress is None and state.frames == [] and state.rounds == 3

        log.unlink()
        resumed = list(workflow.resume(migrated, RunOptions(), resources))
        assert resumed[-1].outputs == {"n": 5, "rounds": 5}
        assert any(isinstance(e, ev.ContainerStarted) for e in resumed)  # run again whole
        assert [e.index for e in resumed if isinstance(e, ev.ContainerNext)] == [1, 2, 3, 4]
        assert ran(log) == Counter({f"w:{i}": 1 for i in range(5)})

        log.unlink()  # the same snapshot as version 2 goes on from round 2
        resumed = list(workflow.resume(cp.load(json.dumps(data)), RunOptions(), resources))
        assert resumed[-1].outputs == {"n": 5, "rounds": 5}
        assert not any(isinstance(e, ev.ContainerStarted) for e in resumed)
        assert ran(log) == Counter({"w:2": 1, "w:3": 1, "w:4": 1})


# ---- a round that is ending when the checkpoint is taken


def snapshot_at(
    doc: dict[str, Any], gate: str, when: Callable[[ev.Event], bool]
) -> tuple[Any, cp.Snapshot]:
    """Run `doc` in this process until `when(event)`, take the run's snapshot at
    that boundary, and drop the run (its gate closed: what waits on it is cut)."""
    pausing_node.GATES.setdefault(gate, threading.Event()).clear()
    workflow = load_workflow(doc)
    with RunResources.open(clients=object()) as resources:  # type: ignore[arg-type]
        run = workflow.run({"q": "a"}, RunOptions(), resources)
        for event in run:
            if when(event):
                break
        snapshot = run.snapshot()
        run.close()
    return workflow, cp.load(snapshot.model_dump_json())


def resumed_outputs(workflow: Any, snapshot: cp.Snapshot, gate: str) -> list[ev.Event]:
    pausing_node.GATES[gate].set()
    with RunResources.open(clients=object()) as resources:  # type: ignore[arg-type]
        return list(workflow.resume(snapshot, RunOptions(), resources))


def test_a_loop_round_that_broke_ends_the_loop_after_it_on_resume() -> None:
    """Round 0 reaches its loop-end while w (the round's other branch) still works:
    the checkpoint keeps that the round broke; resumed, the loop ends after it."""
    nodes = [
        node(
            "lp",
            "loop",
            loop_count=5,
            loop_variables=[number("n")],
            start_node_id="lpstart",
            logical_operator="and",
        ),
        node("lpstart", "loop-start", "lp"),
        node("w", "test-work", "lp", gate="gb", tag=["lp", "n"], wait_at="0"),
        node("stop", "loop-end", "lp"),
        node("end", "end", outputs=[{"variable": "r", "value_selector": ["lp", "loop_round"]}]),
    ]
    edges = [
        edge("start", "lp"),
        edge("lpstart", "w"),
        edge("lpstart", "stop"),
        edge("lp", "end"),
    ]
    doc = app(nodes, edges)

    def stopped(event: ev.Event) -> bool:
        return isinstance(event, ev.NodeSucceeded) and event.node_id == "stop"

    workflow, snapshot = snapshot_at(doc, "gb", stopped)
    (frame,) = snapshot.frame.containers[0].frames
    assert frame.broke and [r.node_id for r in frame.running] == ["w"]
    events = resumed_outputs(workflow, snapshot, "gb")
    assert events[-1].outputs == {"r": 1}
    assert not [e for e in events if isinstance(e, ev.ContainerNext)]


def test_an_iteration_round_that_failed_stays_failed_on_resume() -> None:
    """Round a's bad node failed while its w still works (continue-on-error, two
    rounds at once): a checkpoint taken as round b goes on keeps round a's
    failure; resumed, item a's output is None."""
    nodes = [
        node(
            "it",
            "iteration",
            iterator_selector=["conversation", "items"],
            output_selector=["w", "output"],
            start_node_id="itstart",
            error_handle_mode="continue-on-error",
            flatten_output=False,
            is_parallel=True,
            parallel_nums=2,
        ),
        node("itstart", "iteration-start", "it"),
        node("w", "test-work", "it", gate="ge", tag=["it", "item"], wait_at="a"),
        node(
            "bad",
            "template-transform",
            "it",
            template="{% if x == 'a' %}{{ 1 // 0 }}{% endif %}",
            variables=[{"variable": "x", "value_selector": ["it", "item"]}],
        ),
        node("end", "end", outputs=[{"variable": "out", "value_selector": ["it", "output"]}]),
    ]
    edges = [
        edge("start", "it"),
        edge("itstart", "w"),
        edge("itstart", "bad"),
        edge("it", "end"),
    ]
    doc = app(nodes, edges, ["a", "b"])

    def b_went_on(event: ev.Event) -> bool:
        return isinstance(event, ev.NodeSucceeded) and event.node_id == "bad"  # round b's

    workflow, snapshot = snapshot_at(doc, "ge", b_went_on)
    frame = snapshot.frame.containers[0].frames[0]
    assert frame.index == 0
    assert frame.error is not None and "division" in frame.error
    events = resumed_outputs(workflow, snapshot, "ge")
    assert events[-1].outputs == {"out": [None, "w"]}


def test_a_loop_checkpointed_between_rounds_starts_the_next_one_with_its_variables(
    tmp_path: Path,
) -> None:
    """A snapshot as round 3 is announced (rounds 0-2 finished, none in flight):
    resumed, the loop announces round 3 again with the variables round 2 left,
    runs rounds 3 and 4 only, and reports every round's variables."""
    log, release = tmp_path / "ran.log", tmp_path / "go"
    workflow = load_workflow(loop_doc(log, release, wait_at=-1))
    with RunResources.open(clients=object()) as resources:  # type: ignore[arg-type]
        run = workflow.run({"q": "a"}, RunOptions(), resources)
        for event in run:
            if isinstance(event, ev.ContainerNext) and event.index == 3:
                break
        snapshot = cp.load(run.snapshot().model_dump_json())
        run.close()
        (lp,) = snapshot.frame.containers
        assert lp.frames == [] and lp.progress is not None and lp.progress["rounds"] == 3
        log.unlink()
        events = list(workflow.resume(snapshot, RunOptions(), resources))
    nexts = [e for e in events if isinstance(e, ev.ContainerNext)]
    assert [e.index for e in nexts] == [3, 4]
    assert nexts[0].previous_output == {"n": 3}
    assert ran(log) == Counter({"w:3": 1, "w:4": 1})
    completed = next(e for e in events if isinstance(e, ev.ContainerCompleted))
    by_round = completed.execution_metadata["loop_variable_map"]
    assert by_round == {str(i): {"n": i + 1} for i in range(5)}
    assert events[-1].outputs == {"n": 5, "rounds": 5}


# ---- a real human-input form inside a loop round, across processes


def form_loop_doc() -> dict[str, Any]:
    """start -> lp (3 rounds; n from 0, said ""): check: in round 1 review (a
    human-input form: a paragraph `note`, action `ok`) -ok-> keep (said = the
    note) -> inc; otherwise inc (n += 1)) -> end (n, said, rounds)."""
    condition = {"variable_selector": ["lp", "n"], "comparison_operator": "=", "value": "1"}
    said = {"label": "said", "var_type": "string", "value_type": "constant", "value": ""}
    review = node(
        "review",
        "human-input",
        "lp",
        form_content="Round {{#lp.n#}}: {{#$output.note#}}",
        inputs=[
            {
                "type": "paragraph",
                "output_variable_name": "note",
                "default": {"type": "constant", "selector": [], "value": ""},
            }
        ],
        user_actions=[{"id": "ok", "title": "OK", "button_style": "primary"}],
        delivery_methods=[{"id": "d1", "type": "webapp", "enabled": True, "config": {}}],
        timeout=1,
        timeout_unit="day",
    )
    nodes = [
        node(
            "lp",
            "loop",
            loop_count=3,
            loop_variables=[number("n"), said],
            start_node_id="lpstart",
            logical_operator="and",
        ),
        node("lpstart", "loop-start", "lp"),
        node("check", "if-else", "lp", cases=[{"case_id": "ask", "conditions": [condition]}]),
        review,
        assign("keep", "lp", ["lp", "said"], "over-write", ["review", "note"]),
        assign("inc", "lp", ["lp", "n"], "+=", 1),
        node(
            "end",
            "end",
            outputs=[
                {"variable": "n", "value_selector": ["lp", "n"]},
                {"variable": "said", "value_selector": ["lp", "said"]},
                {"variable": "rounds", "value_selector": ["lp", "loop_round"]},
            ],
        ),
    ]
    edges = [
        edge("start", "lp"),
        edge("lpstart", "check"),
        edge("check", "review", "ask"),
        edge("review", "keep", "ok"),
        edge("keep", "inc"),
        edge("check", "inc", "false"),
        edge("lp", "end"),
    ]
    return app(nodes, edges)


def test_a_human_input_form_inside_a_loop_round_pauses_and_resumes_in_another_process(
    tmp_path: Path, location: str
) -> None:
    doc = write_doc(tmp_path, form_loop_doc(), "app.yml")
    paused = firstgate("run", doc, "--input", "q=a", "--state", location, "--json")
    assert paused.returncode == 3, paused.stderr  # paused
    first = [json.loads(line) for line in paused.stdout.splitlines() if line.startswith("{")]
    assert names(first)[-2:] == ["human_input_required", "workflow_paused"]
    assert first[-1]["data"]["paused_nodes"] == ["review"]
    required = first[-2]["data"]
    assert required["node_id"] == "review" and "Round 1" in required["form_content"]
    token = required["form_token"]
    resumed = firstgate(
        "resume", token, "--action", "ok", "--input", "note=looks fine",
        "--state", location, "--json",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    second = [json.loads(line) for line in resumed.stdout.splitlines() if line.startswith("{")]
    assert names(second)[:2] == ["workflow_started", "human_input_form_filled"]
    assert "loop_started" not in names(second)
    assert finished(second, "review", "loop") == [1]
    assert finished(second, "check", "loop") == [2]  # rounds 0 and 1 checked before
    assert finished(second, "inc", "loop") == [1, 2]
    assert second[-1]["data"]["status"] == "succeeded"
    assert second[-1]["data"]["outputs"] == {"n": 3, "said": "looks fine", "rounds": 3}


def test_a_pause_inside_an_iteration_inside_a_loop_resumes_both_levels() -> None:
    """lp (2 rounds) holds it (the asking iteration): each loop round pauses at
    item b; each resume goes on inside the iteration's round, then the loop's."""
    inner = asking_iteration_doc(1)["workflow"]["graph"]
    nodes = [n for n in inner["nodes"] if n["id"] not in ("start", "end")]
    for found in nodes:
        found.setdefault("parentId", "lp")
        if found["id"] != "it":
            found["parentId"] = "it"
    nodes += [
        node(
            "lp",
            "loop",
            loop_count=2,
            loop_variables=[number("n")],
            start_node_id="lpstart",
            logical_operator="and",
        ),
        node("lpstart", "loop-start", "lp"),
        assign("inc", "lp", ["lp", "n"], "+=", 1),
        node(
            "end",
            "end",
            outputs=[{"variable": "n", "value_selector": ["lp", "n"]}],
        ),
    ]
    edges = [e for e in inner["edges"] if e["source"] not in ("start", "it")]
    edges += [
        edge("start", "lp"),
        edge("lpstart", "it"),
        edge("it", "inc"),
        edge("lp", "end"),
    ]
    workflow = load_workflow(app(nodes, edges, ["a", "b", "c"]))
    with RunResources.open(clients=object()) as resources:  # type: ignore[arg-type]
        run = workflow.run({"q": "a"}, RunOptions(), resources)
        list(run)
        answers = []
        for answer in ("first", "second"):
            assert run.status == "paused" and run.checkpoint is not None
            (lp,) = run.checkpoint.frame.containers
            (loop_round,) = lp.frames
            (it,) = loop_round.containers
            assert loop_round.index == len(answers) and [f.index for f in it.frames] == [1]
            snapshot = cp.load(run.checkpoint.model_dump_json())
            resolved = {"ask": cp.Resolved({"answer": answer}, "yes")}
            run = workflow.resume(snapshot, RunOptions(), resources, resolved=resolved)
            events = list(run)
            answers.append(answer)
    assert run.status == "succeeded"
    assert events[-1].outputs == {"n": 2}
    (it_done,) = [e for e in events if isinstance(e, ev.ContainerCompleted) and e.node_id == "it"]
    assert it_done.outputs == {"output": ["a", "b:second", "c"]}
    said = [e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "say"]
    assert [e.outputs for e in said] == [{"output": "b:second"}]


def test_an_iteration_checkpointed_while_it_stops_runs_again_from_its_first_round() -> None:
    """Round a failed (terminated): the iteration stops, cancelling round b. A
    snapshot taken meanwhile keeps nothing of its rounds (`progress` None): the
    resumed run starts it again, and it fails again the same way, it does not
    go on as if round a had finished."""
    nodes = [
        node(
            "it",
            "iteration",
            iterator_selector=["conversation", "items"],
            output_selector=["w", "output"],
            start_node_id="itstart",
            is_parallel=True,
            parallel_nums=2,
        ),
        node("itstart", "iteration-start", "it"),
        node("w", "test-work", "it", gate="gs", tag=["it", "item"], wait_at="b"),
        node(
            "bad",
            "template-transform",
            "it",
            template="{% if x == 'a' %}{{ 1 // 0 }}{% endif %}",
            variables=[{"variable": "x", "value_selector": ["it", "item"]}],
        ),
        node("end", "end", outputs=[{"variable": "out", "value_selector": ["it", "output"]}]),
    ]
    edges = [
        edge("start", "it"),
        edge("itstart", "bad"),
        edge("itstart", "w"),
        edge("it", "end"),
    ]
    doc = app(nodes, edges, ["a", "b", "c"])

    def b_cut(event: ev.Event) -> bool:  # round b's w, cancelled as the iteration stops
        if not isinstance(event, ev.NodeFinished) or event.node_id != "w":
            return False
        return event.container is not None and event.container.index == 1

    workflow, snapshot = snapshot_at(doc, "gs", b_cut)
    (it,) = snapshot.frame.containers
    assert it.progress is None and it.frames == []
    events = resumed_outputs(workflow, snapshot, "gs")
    assert any(isinstance(e, ev.ContainerStarted) for e in events)
    assert events[-1].status == "failed" and "division" in str(events[-1].error)
