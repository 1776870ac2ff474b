"""The engine with in-process fake clients: scheduling, joins, skips, limits, contexts."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from firstgate.plugin_daemon_client import LLMChunk, current_gate
from firstgate.runtime import RunLimits, RunOptions, RunResources, load_workflow
from firstgate.runtime.dsl.graph import EdgeDef
from firstgate.runtime.execution import events as ev
from firstgate.runtime.execution.limits import Deadline, LimitSettingError
from firstgate.runtime.execution.scheduler import NodeState, Scheduler

Reply = Callable[[list[dict[str, Any]]], Iterator[LLMChunk]]


class FakeClients:
    """Each call pops the next reply (the last one repeats)."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.calls: list[list[dict[str, Any]]] = []

    def client_for(self, provider: str) -> FakeClients:
        return self

    def invoke_llm(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        parameters: dict[str, Any],
        stop: Any = None,
    ) -> Iterator[LLMChunk]:
        self.calls.append(messages)
        reply = self.replies[min(len(self.calls), len(self.replies)) - 1]
        return reply(messages)


def says(*texts: str, delay: float = 0.0) -> Reply:
    def reply(messages: list[dict[str, Any]]) -> Iterator[LLMChunk]:
        for text in texts:
            if delay:
                time.sleep(delay)
            yield LLMChunk(text=text)

    return reply


def fails(exc: Exception) -> Reply:
    def reply(messages: list[dict[str, Any]]) -> Iterator[LLMChunk]:
        raise exc
        yield  # pragma: no cover

    return reply


def node(node_id: str, node_type: str, **data: Any) -> dict[str, Any]:
    return {"id": node_id, "data": {"type": node_type, "title": node_id, **data}}


def llm(node_id: str, text: str = "{{#start.q#}}", **data: Any) -> dict[str, Any]:
    return node(
        node_id,
        "llm",
        model={"provider": "p", "name": "m"},
        prompt_template=[{"role": "user", "text": text}],
        **data,
    )


def edge(source: str, target: str, handle: str = "source") -> dict[str, Any]:
    return {"source": source, "target": target, "sourceHandle": handle}


def doc(
    nodes: list[dict[str, Any]], edges: list[dict[str, Any]], mode: str = "workflow"
) -> dict[str, Any]:
    start = node("start", "start", variables=[{"variable": "q", "type": "text-input"}])
    return {
        "kind": "app",
        "app": {"mode": mode},
        "workflow": {"graph": {"nodes": [start, *nodes], "edges": edges}},
    }


def run(
    document: dict[str, Any], clients: FakeClients, inputs: dict[str, Any] | None = None, **kw: Any
) -> list[ev.Event]:
    workflow = load_workflow(document)
    with RunResources.open(clients=clients) as resources:
        return list(workflow.run(inputs or {"q": "hi"}, RunOptions(**kw), resources))


def final(events: list[ev.Event]) -> ev.WorkflowFinished:
    """The run's end (a chatflow's turn goes on with message_end after it)."""
    return next(e for e in reversed(events) if isinstance(e, ev.WorkflowFinished))


def started(events: list[ev.Event]) -> list[str]:
    return [e.node_id for e in events if isinstance(e, ev.NodeStarted)]


BRANCHY = doc(
    [
        node(
            "branch",
            "if-else",
            cases=[
                {
                    "case_id": "yes",
                    "conditions": [
                        {
                            "variable_selector": ["start", "q"],
                            "comparison_operator": "is",
                            "value": "yes",
                        }
                    ],
                }
            ],
        ),
        node("t_yes", "template-transform", template="Y"),
        node("t_no", "template-transform", template="N"),
        node("after_no", "template-transform", template="N2"),
        node(
            "join", "variable-aggregator", variables=[["t_yes", "output"], ["after_no", "output"]]
        ),
        node("end", "end", outputs=[{"variable": "out", "value_selector": ["join", "output"]}]),
    ],
    [
        edge("start", "branch"),
        edge("branch", "t_yes", "yes"),
        edge("branch", "t_no", "false"),
        edge("t_no", "after_no"),
        edge("t_yes", "join"),
        edge("after_no", "join"),
        edge("join", "end"),
    ],
)


def test_if_else_branch_taken_and_the_other_skipped_all_the_way_to_the_join() -> None:
    yes = run(BRANCHY, FakeClients(), {"q": "yes"})
    assert started(yes) == ["start", "branch", "t_yes", "join", "end"]
    assert yes[-1].outputs == {"out": "Y"}
    no = run(BRANCHY, FakeClients(), {"q": "no"})
    assert started(no) == ["start", "branch", "t_no", "after_no", "join", "end"]
    assert no[-1].outputs == {"out": "N2"}


def test_scheduler_join_waits_for_every_taken_branch() -> None:
    workflow = load_workflow(BRANCHY)
    scheduler = Scheduler(workflow.graph)
    assert scheduler.complete("start", None).ready == ["branch"]
    step = scheduler.complete("branch", {"false"})
    assert step.ready == ["t_no"]
    assert [e.target for e in step.taken] == ["t_no"]
    assert step.skipped == ["t_yes"]
    assert scheduler.node_state("t_yes") is NodeState.SKIPPED
    assert scheduler.complete("t_no", None).ready == ["after_no"]
    assert scheduler.node_state("join") is NodeState.PENDING  # after_no is still running
    assert scheduler.complete("after_no", None).ready == ["join"]


def test_a_node_whose_every_input_was_skipped_is_skipped_and_so_is_what_it_feeds() -> None:
    workflow = load_workflow(BRANCHY)
    scheduler = Scheduler(workflow.graph)
    scheduler.complete("start", None)
    scheduler.complete("branch", {"yes"})
    assert scheduler.node_state("t_no") is NodeState.SKIPPED
    assert scheduler.node_state("after_no") is NodeState.SKIPPED
    edges: list[EdgeDef] = workflow.graph.in_edges("join")
    assert [scheduler.edge_state(e).value for e in edges] == ["pending", "skipped"]


def test_fail_branch_selects_only_the_fail_edges() -> None:
    document = doc(
        [
            llm("l", error_strategy="fail-branch"),
            node("ok", "end", outputs=[{"variable": "t", "value_selector": ["l", "text"]}]),
            node("bad", "end", outputs=[{"variable": "e", "value_selector": ["l", "error_type"]}]),
        ],
        [edge("start", "l"), edge("l", "ok"), edge("l", "bad", "fail-branch")],
    )
    failing = run(document, FakeClients(fails(ValueError("x"))))
    assert started(failing) == ["start", "l", "bad"]
    assert failing[-1].outputs == {"e": "ValueError"}
    fine = run(document, FakeClients(says("hi")))
    assert started(fine) == ["start", "l", "ok"]
    assert isinstance(fine[-1], ev.WorkflowSucceeded)


def test_older_success_branch_handle_is_the_success_edge() -> None:
    document = doc(
        [llm("l", error_strategy="fail-branch"), node("ok", "end", outputs=[])],
        [edge("start", "l"), edge("l", "ok", "success-branch")],
    )
    assert started(run(document, FakeClients(says("hi")))) == ["start", "l", "ok"]


def test_retry_sleeps_the_interval_between_attempts() -> None:
    document = doc(
        [llm("l", retry_config={"retry_enabled": True, "max_retries": 1, "retry_interval": 300})],
        [edge("start", "l")],
    )
    clients = FakeClients(fails(RuntimeError("once")), says("ok"))
    events = run(document, clients)
    (retry,) = [e for e in events if isinstance(e, ev.NodeRetry)]
    chunk = next(e for e in events if isinstance(e, ev.NodeFirstToken))
    assert chunk.elapsed - retry.elapsed >= 0.28
    assert retry.retry_interval_ms == 300 and retry.error_type == "RuntimeError"
    assert chunk.attempt == 2


def test_retry_disabled_means_one_attempt() -> None:
    document = doc(
        [llm("l", retry_config={"retry_enabled": False, "max_retries": 3})], [edge("start", "l")]
    )
    clients = FakeClients(fails(RuntimeError("no")))
    events = run(document, clients)
    assert len(clients.calls) == 1
    assert isinstance(events[-1], ev.WorkflowFailed)


LEAK: contextvars.ContextVar[int | None] = contextvars.ContextVar("leak", default=None)


def test_each_attempt_runs_in_its_own_context_and_sees_its_gate() -> None:
    seen: list[tuple[Any, Any]] = []

    def reply(messages: list[dict[str, Any]]) -> Iterator[LLMChunk]:
        seen.append((LEAK.get(), current_gate()))
        LEAK.set(len(seen))
        if len(seen) < 3:
            raise RuntimeError("again")
        yield LLMChunk(text="done")

    document = doc(
        [llm("l", retry_config={"retry_enabled": True, "max_retries": 2, "retry_interval": 0})],
        [edge("start", "l")],
    )
    events = run(document, FakeClients(reply))
    assert isinstance(events[-1], ev.WorkflowSucceeded)
    assert [leak for leak, _ in seen] == [None, None, None]  # nothing leaks across attempts
    gates = [gate for _, gate in seen]
    assert all(g is not None for g in gates) and len({id(g) for g in gates}) == 3


def test_max_steps() -> None:
    document = doc(
        [
            node("a", "template-transform", template="a"),
            node("b", "template-transform", template="b"),
        ],
        [edge("start", "a"), edge("a", "b")],
    )
    events = run(document, FakeClients(), limits=RunLimits(max_steps=2))
    assert started(events) == ["start", "a"]
    final = events[-1]
    assert (
        isinstance(final, ev.WorkflowFailed) and "limit of 2 node executions" in final.error_message
    )


def test_answer_does_not_stream_past_an_undecided_branch() -> None:
    document = doc(
        [
            llm("l"),
            node(
                "branch",
                "if-else",
                cases=[
                    {
                        "case_id": "yes",
                        "conditions": [
                            {
                                "variable_selector": ["l", "text"],
                                "comparison_operator": "contains",
                                "value": "yes",
                            }
                        ],
                    }
                ],
            ),
            node("a", "answer", answer="said: {{#l.text#}}"),
        ],
        [edge("start", "l"), edge("l", "branch"), edge("branch", "a", "yes")],
        mode="advanced-chat",
    )
    events = run(document, FakeClients(says("no", " way")))
    assert not [e for e in events if isinstance(e, ev.TextChunk)]
    events = run(document, FakeClients(says("yes", "!")))
    branch_started, branch_done = (
        next(i for i, e in enumerate(events) if isinstance(e, kind) and e.node_id == "branch")
        for kind in (ev.NodeStarted, ev.NodeSucceeded)
    )
    chunks = [(i, e.text) for i, e in enumerate(events) if isinstance(e, ev.TextChunk)]
    assert "".join(t for _, t in chunks) == "said: yes!"
    # As in Dify's if-else streaming test: the held text goes out once the branch
    # has chosen, right before the branch's own node_finished.
    assert [i for i, _ in chunks] == list(range(branch_started + 1, branch_done))


def test_answer_chunks_keep_template_order_across_parallel_llms() -> None:
    document = doc(
        [
            llm("slow", text="slow"),
            llm("fast", text="fast"),
            node("a", "answer", answer="[{{#slow.text#}}|{{#fast.text#}}]"),
        ],
        [edge("start", "slow"), edge("start", "fast"), edge("slow", "a"), edge("fast", "a")],
        mode="advanced-chat",
    )

    def by_prompt(messages: list[dict[str, Any]]) -> Iterator[LLMChunk]:
        if messages[-1]["content"] == "slow":
            return says("s1", "s2", delay=0.1)(messages)
        return says("f1", "f2")(messages)

    events = run(document, FakeClients(by_prompt))
    text = "".join(e.text for e in events if isinstance(e, ev.TextChunk))
    assert text == "[s1s2|f1f2]"
    assert final(events).outputs == {"answer": "[s1s2|f1f2]"}
    # The fast branch finished first, yet its text waited for the slow one's.
    fast_done = next(
        i for i, e in enumerate(events) if isinstance(e, ev.NodeSucceeded) and e.node_id == "fast"
    )
    first_chunk = next(
        i for i, e in enumerate(events) if isinstance(e, ev.TextChunk) and e.text == "s1"
    )
    assert fast_done < first_chunk


def test_chunks_that_arrive_before_their_turn_are_buffered_not_lost() -> None:
    document = doc(
        [
            llm("first", text="first"),
            llm("second", text="second"),
            node("a", "answer", answer="{{#first.text#}}|{{#second.text#}}"),
        ],
        [edge("start", "first"), edge("start", "second"), edge("first", "a"), edge("second", "a")],
        mode="advanced-chat",
    )

    def reply(messages: list[dict[str, Any]]) -> Iterator[LLMChunk]:
        if messages[-1]["content"] == "first":
            return says("a1", "a2", delay=0.1)(messages)
        return says("b1", "b2", "b3", delay=0.15)(
            messages
        )  # b1 arrives while "first" still streams

    events = run(document, FakeClients(reply))
    pieces = [e for e in events if isinstance(e, ev.TextChunk)]
    assert "".join(p.text for p in pieces) == "a1a2|b1b2b3"
    assert [p.text for p in pieces if p.source_node_id == "second"] == ["b1", "b2", "b3"]
    assert all(p.attempt == 1 for p in pieces if p.source_node_id)


def test_run_limits_are_checked_where_they_are_made() -> None:
    assert RunLimits(max_run_seconds=0).max_run_seconds is None  # 0: no time limit
    assert RunLimits(max_run_seconds=2).max_run_seconds == 2.0
    for bad in ({"max_steps": 0}, {"max_steps": 1.5}, {"max_steps": True}):
        with pytest.raises(LimitSettingError):
            RunLimits(**bad)  # type: ignore[arg-type]
    for seconds in (-1, float("inf"), float("nan"), "10"):
        with pytest.raises(LimitSettingError):
            RunLimits(max_run_seconds=seconds)  # type: ignore[arg-type]
    assert RunLimits.from_text("7", "0.5") == RunLimits(max_steps=7, max_run_seconds=0.5)


def test_a_deadline_is_a_point_on_its_clock() -> None:
    now = [10.0]
    deadline = Deadline.after(2.5, clock=lambda: now[0])
    assert deadline.remaining() == 2.5 and not deadline.passed()
    now[0] = 13.0
    assert deadline.remaining() == 0.0 and deadline.passed()
    never = Deadline.after(None)
    assert never.remaining() is None and not never.passed()
    assert Deadline.after(0).at is None  # 0: no time limit


def waits_for_cancel(messages: list[dict[str, Any]]) -> Iterator[LLMChunk]:
    """A model that never answers: it ends only when its gate is cancelled (or after 5 s)."""
    gate = current_gate()
    give_up = time.monotonic() + 5
    while gate is not None and gate.tripped is None and time.monotonic() < give_up:
        time.sleep(0.01)
    yield LLMChunk(text="too late")


def test_the_time_limit_stops_a_run_waiting_on_a_worker_node() -> None:
    document = doc([llm("llm")], [edge("start", "llm")])
    started_at = time.monotonic()
    events = run(document, FakeClients(waits_for_cancel), limits=RunLimits(max_run_seconds=0.3))
    assert time.monotonic() - started_at < 2.0
    done = final(events)
    assert isinstance(done, ev.WorkflowFailed) and done.error_type == "LimitExceededError"


def test_the_time_limit_stops_a_run_of_inline_nodes_that_never_waits() -> None:
    # Every node runs on the dispatcher: the run never waits for a worker's event.
    length = 2000
    nodes = [node(f"t{i}", "template-transform", template=f"{i}") for i in range(length)]
    edges = [edge("start" if i == 0 else f"t{i - 1}", f"t{i}") for i in range(length)]
    limits = RunLimits(max_steps=10 * length, max_run_seconds=0.005)
    events = run(doc(nodes, edges), FakeClients(), limits=limits)
    done = final(events)
    assert isinstance(done, ev.WorkflowFailed) and done.error_type == "LimitExceededError"
    assert done.total_steps < length


def test_no_timer_threads_in_production_code() -> None:
    # Deadlines are points on a clock that a wait is bounded by, not threads.
    root = Path(__file__).resolve().parents[2]
    found = [
        f"{path.relative_to(root)}"
        for path in root.rglob("*.py")
        if ".venv" not in path.parts
        and path.relative_to(root).parts[0] not in ("tests", "bench")
        and "threading.Timer" in path.read_text(encoding="utf-8")
    ]
    assert not found
