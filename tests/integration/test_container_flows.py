"""Iteration and loop as Dify's graph-engine tests check them, on flows written
for this project (`tests/flows/`, in the shape of Dify's fixtures; no Dify
file is copied): the outputs Dify's tests expect, and the event order, in
Dify's terms, of the events Dify streams. Code nodes run in the real sandbox.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from firstgate.runtime import RunOptions, RunResources, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.sandbox.process_pool import ProcessSandbox
from firstgate.store import open_store

from tests.integration.sandbox_support import small_sandbox
from tests.run_events import final

FLOWS = Path(__file__).resolve().parents[1] / "flows"


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessSandbox]:
    with small_sandbox() as started:
        yield started


def run_flow(
    name: str,
    inputs: dict[str, Any] | None = None,
    *,
    code_executor: Any = None,
    store: Any = None,
    **options: Any,
) -> list[ev.Event]:
    workflow = load_workflow(FLOWS / f"{name}.yml")
    with RunResources.open(code_executor=code_executor, store=store) as resources:
        return list(workflow.run(inputs or {}, RunOptions(**options), resources))


def shape(events: list[ev.Event]) -> list[str]:
    """The events in the words of Dify's graph-engine tests. Dify streams a
    container's `*_started` / `*_next` / `*_completed` and leaves out the
    container's own `node_started` / `node_finished` (so do we)."""
    names: list[str] = []
    for e in events:
        if isinstance(e, ev.ContainerEvent):
            kind = e.kind.capitalize()
            suffix = {"started": "Started", "next": "Next", "completed": "Succeeded"}[e.name]
            names.append(f"NodeRun{kind}{suffix}")
        elif isinstance(e, ev.WorkflowStarted):
            names.append("GraphRunStarted")
        elif isinstance(e, ev.NodeStarted):
            names.append("NodeRunStarted")
        elif isinstance(e, ev.TextChunk):
            names.append("NodeRunStreamChunk")
        elif isinstance(e, ev.NodeSucceeded):
            names.append("NodeRunSucceeded")
        elif isinstance(e, ev.WorkflowSucceeded):
            names.append("GraphRunSucceeded")
    return names


def chunks(events: list[ev.Event]) -> list[ev.TextChunk]:
    return [e for e in events if isinstance(e, ev.TextChunk)]


def test_an_answer_inside_an_iteration_streams_each_item() -> None:
    events = run_flow("iteration_answer_per_item", query="hi")
    assert isinstance(final(events), ev.WorkflowSucceeded)
    assert "".join(c.text for c in chunks(events)) == "pear\nplum\nend"
    # The inner answer's text streams inside the iteration, round by round.
    started = next(i for i, e in enumerate(events) if isinstance(e, ev.ContainerStarted))
    completed = next(i for i, e in enumerate(events) if isinstance(e, ev.ContainerCompleted))
    inside = [c.text for c in chunks(events[started:completed])]
    assert "".join(inside) == "pear\nplum\n"
    assert {c.node_id for c in chunks(events[started:completed])} == {"say"}
    nexts = [e for e in events if isinstance(e, ev.ContainerNext)]
    assert [n.index for n in nexts] == [0, 1]
    # Each item's text comes after its round's `iteration_next`.
    assert events.index(nexts[1]) < events.index(
        next(c for c in chunks(events) if c.text == "plum")
    )


def test_an_answer_inside_a_loop_streams_each_round_in_difys_order() -> None:
    events = run_flow("loop_answer_per_round", query="1")
    assert final(events).outputs == {"answer": "1\n2\n1 + 2"}
    assert "".join(c.text for c in chunks(events)) == "1\n2\n1 + 2"
    assert shape(events) == [
        "GraphRunStarted",
        "NodeRunStarted",  # start
        "NodeRunSucceeded",
        "NodeRunLoopStarted",
        "NodeRunStarted",  # the assigner
        "NodeRunStreamChunk",  # 1
        "NodeRunStreamChunk",  # \n
        "NodeRunSucceeded",
        "NodeRunStarted",  # the inner answer
        "NodeRunSucceeded",
        "NodeRunLoopNext",
        "NodeRunStarted",  # the assigner
        "NodeRunStreamChunk",  # 2
        "NodeRunStreamChunk",  # \n
        "NodeRunSucceeded",
        "NodeRunStarted",  # the inner answer
        "NodeRunSucceeded",
        "NodeRunLoopSucceeded",
        "NodeRunStreamChunk",  # 1 (the query)
        "NodeRunStreamChunk",  # " + "
        "NodeRunStreamChunk",  # 2
        "NodeRunStarted",  # the answer after the loop
        "NodeRunSucceeded",
        "GraphRunSucceeded",
    ]


def test_a_loop_counts_until_its_break_condition() -> None:
    events = run_flow("loop_count_to_five")
    assert final(events).outputs == {"num": 5}
    done = next(e for e in events if isinstance(e, ev.ContainerCompleted))
    assert done.outputs == {"num": 5, "loop_round": 4}
    assert done.execution_metadata["completed_reason"] == "loop_break"
    assert done.execution_metadata["loop_variable_map"] == {
        "0": {"num": 2},
        "1": {"num": 3},
        "2": {"num": 4},
        "3": {"num": 5},
    }


EXPECTED_FORMATTED = {"output": ["output: 1", "output: 2", "output: 3"]}


def test_an_iteration_formats_each_number(pool: ProcessSandbox) -> None:
    events = run_flow("iteration_formats_numbers", code_executor=pool)
    assert final(events).outputs == EXPECTED_FORMATTED


def test_a_parallel_iteration_keeps_the_items_order_run_after_run(pool: ProcessSandbox) -> None:
    workflow = load_workflow(FLOWS / "iteration_formats_numbers_parallel.yml")
    for _ in range(5):
        with RunResources.open(code_executor=pool) as resources:
            events = list(workflow.run({}, resources=resources))
        assert final(events).outputs == EXPECTED_FORMATTED
        # The three rounds start at once (parallel_nums 10): three `next` before any node.
        kinds = [type(e) for e in events if isinstance(e, ev.ContainerNext | ev.NodeStarted)]
        first_inner = kinds.index(ev.NodeStarted, 2)  # after start and the code node
        assert kinds[first_inner - 3 : first_inner] == [ev.ContainerNext] * 3


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("iteration_flatten_on", [1, 2, 2, 4, 3, 6]),
        ("iteration_flatten_off", [[1, 2], [2, 4], [3, 6]]),
    ],
)
def test_flatten_output(name: str, expected: list[Any], pool: ProcessSandbox) -> None:
    events = run_flow(name, code_executor=pool)
    assert final(events).outputs == {"output": expected}


def test_a_conversation_variable_written_in_an_iteration_is_seen_after_it_and_kept(
    pool: ProcessSandbox, tmp_path: Path
) -> None:
    store = open_store(tmp_path / "state.db")
    try:
        question = "ensure conversation variable syncs"
        events = run_flow(
            "conversation_variable_set_in_iteration",
            query=question,
            code_executor=pool,
            store=store,
        )
        assert final(events).outputs == {"answer": question}
        conversation = events[-1].run.conversation_id
        assert conversation
        # The next turn starts from what this one wrote.
        again = run_flow(
            "conversation_variable_set_in_iteration",
            query="second",
            conversation_id=conversation,
            code_executor=pool,
            store=store,
        )
        assert final(again).outputs == {"answer": "second"}
        assert store.variables(conversation)["said"].value == "second"
    finally:
        store.close()
