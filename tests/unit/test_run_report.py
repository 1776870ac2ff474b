"""What a run reports, without threads: facts in (a node started, a piece of
text, a node ended, the run ended), events out, secrets kept out of them."""

from __future__ import annotations

from typing import Any

import pytest
from firstgate.common.cancel import CancelToken
from firstgate.nodes.base import AgentLogEntry, Round
from firstgate.plugin_daemon_client.fallback import FallbackEvent
from firstgate.plugin_daemon_client.gate import WaitInfo
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.execution.error_handler import Outcome, Status
from firstgate.runtime.execution.frames import ContainerExecution, Execution, Frame
from firstgate.runtime.execution.redaction import Redactor
from firstgate.runtime.execution.response_stream import Piece
from firstgate.runtime.execution.run_report import RunReport
from firstgate.runtime.execution.session import RunSummary
from firstgate.runtime.execution.variable_pool import VariablePool

SECRET = "sk-very-secret-value"
HIDDEN = "***"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def graph(mode: str = "workflow") -> Any:
    document = {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "r", "mode": mode},
        "workflow": {
            "graph": {
                "nodes": [
                    {"id": "start", "data": {"type": "start", "title": "Start"}},
                    {
                        "id": "t",
                        "data": {
                            "type": "template-transform",
                            "title": "T",
                            "template": "x",
                            "variables": [],
                        },
                    },
                    {
                        "id": "loop",
                        "data": {
                            "type": "loop",
                            "title": "L",
                            "start_node_id": "ls",
                            "loop_count": 1,
                            "break_conditions": [],
                        },
                    },
                    {"id": "ls", "parentId": "loop", "data": {"type": "loop-start", "title": ""}},
                    {
                        "id": "inner",
                        "parentId": "loop",
                        "data": {
                            "type": "template-transform",
                            "title": "I",
                            "template": "y",
                            "variables": [],
                        },
                    },
                    {"id": "end", "data": {"type": "end", "title": "End", "outputs": []}},
                ],
                "edges": [
                    {"source": "start", "target": "t"},
                    {"source": "t", "target": "loop"},
                    {"source": "ls", "target": "inner"},
                    {"source": "loop", "target": "end"},
                ],
            }
        },
    }
    return load_workflow(document).graph


def info(chat: bool = False) -> ev.RunInfo:
    return ev.RunInfo(
        task_id="task",
        workflow_run_id="run",
        workflow_id="wf",
        app_id="app",
        mode="advanced-chat" if chat else "workflow",
        user_id="u",
        created_at=1,
        conversation_id="c" if chat else None,
        message_id="m" if chat else None,
    )


def report(clock: Clock | None = None, chat: bool = False) -> RunReport:
    return RunReport(info(chat), Redactor([SECRET]), {"q": f"ask {SECRET}"}, clock=clock or Clock())


def frame(owner: ContainerExecution | None = None) -> Frame:
    return Frame.open(graph(), None, VariablePool({}), CancelToken(), owner=owner)


def execution(node_id: str = "t", where: Frame | None = None, index: int = 1) -> Execution:
    where = where or frame()
    return Execution(
        id=f"e-{node_id}-{index}",
        index=index,
        node=where.graph.all_nodes[node_id],
        frame=where,
        predecessor="start",
        started=100.0,
        created_at=1,
    )


def loop_execution() -> tuple[Execution, ContainerExecution]:
    outer = execution("loop")
    run: Any = type("Run", (), {"details": {"note": SECRET}, "metadata": {}})()
    container = ContainerExecution(
        execution=outer,
        run=run,
        kind="loop",
        graph=outer.frame.graph,
        scope=outer.frame.scope,
        cancel=CancelToken(),
        inputs={"count": SECRET},
    )
    outer.container = container
    return outer, container


def test_every_event_carries_the_run_and_the_time_since_it_started() -> None:
    clock = Clock()
    r = report(clock)
    clock.now = 150.0
    started = r.started()  # the clock starts when iteration begins, not at construction
    clock.now = 152.5
    node = r.node_started(execution())
    assert started.run.workflow_run_id == "run" and started.elapsed == 0.0
    assert node.elapsed == 2.5 and node.node_id == "t" and node.index == 1
    assert node.predecessor_node_id == "start"


def test_secrets_never_reach_an_event() -> None:
    r = report()
    e = execution()
    piece = Piece("end", f"text {SECRET}", ("t", "output"), source="t", attempt=1)
    wait = WaitInfo(elapsed_s=1.0, extended_by_s=1.0, extensions=1, prompt_tokens=3)
    fallback = FallbackEvent(
        "cap",
        "timeout",
        "b",
        "watchdog.fallback.cap",
        {"target": SECRET, "cap": "1 s", "source": "a"},
    )
    log = AgentLogEntry("l", "round", "error", error=f"bad {SECRET}", data={"k": SECRET})
    failure = RuntimeError(f"server said {SECRET}")
    outcome = Outcome(
        Status.FAILED,
        1,
        outputs={"o": SECRET},
        error=failure,
        process_data={"p": SECRET},
        inputs={"i": SECRET},
    )
    events: list[ev.Event] = [
        r.started(),
        *r.text(e.frame, piece),
        *r.flush_text(),
        r.waiting(e, 1, wait, None),
        r.fallback(e, 1, fallback),
        r.agent_log(e, log),
        r.retry(e, 1, failure, 10),
        r.node_ended(e, outcome),
        r.failed(failure),
    ]
    for event in events:
        assert SECRET not in repr(event.payload()), event.name
    assert SECRET not in r.answer and HIDDEN in r.answer
    assert all(SECRET not in repr(record) for record in r.records)


def test_a_container_reports_its_redacted_inputs_and_its_rounds_tokens() -> None:
    r = report()
    outer, container = loop_execution()
    assert SECRET not in repr(r.container_started(outer, "loop", container).payload())
    assert SECRET not in repr(r.round_next(container, Round(0, previous_output=SECRET)).payload())
    inner_frame = frame(owner=container)
    inner = execution("inner", inner_frame, index=2)
    usage = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    ended = r.node_ended(inner, Outcome(Status.SUCCEEDED, 1, usage=usage))
    assert ended.execution_metadata["total_tokens"] == 7
    assert container.tokens == 7  # counted up through its owner
    completed = r.node_ended(outer, Outcome(Status.SUCCEEDED, 1))
    assert isinstance(completed, ev.ContainerCompleted)
    assert completed.total_tokens == 7 and completed.inputs == {"count": HIDDEN}
    assert completed.execution_metadata["note"] == HIDDEN
    assert (r.tokens, r.usage["prompt_tokens"]) == (7, 3)
    assert [rec.node_id for rec in r.records] == ["inner", "loop"]


def test_a_stopped_node_says_why_from_its_frames_token() -> None:
    r = report()
    e = execution()
    e.frame.cancel.cancel("user pressed stop")
    ended = r.node_ended(e, Outcome(Status.CANCELLED, 1))
    assert isinstance(ended, ev.NodeStopped)
    assert ended.error_message == "user pressed stop"
    assert ended.error_type == "StreamCancelledError"


def test_a_handled_failure_makes_the_run_partial() -> None:
    r = report()
    assert r.succeeded().status == "succeeded"
    handled = Outcome(Status.EXCEPTION, 1, error=ValueError("x"), strategy="fail-branch")
    ended = r.node_ended(execution(), handled)
    assert isinstance(ended, ev.NodeException) and ended.strategy == "fail-branch"
    done = r.succeeded()
    assert isinstance(done, ev.WorkflowPartialSucceeded) and done.exceptions_count == 1
    assert r.status == "partial-succeeded"


def test_answers_add_up_and_other_outputs_are_set() -> None:
    r = report()
    r.merge_response({"answer": "a", "x": 1})
    r.merge_response({"answer": "b", "x": 2})
    assert r.outputs == {"answer": "ab", "x": 2}


def test_the_end_records_the_summary_then_reports_the_turn() -> None:
    r = report(chat=True)
    r.started()
    r.next_index()
    r.wrote("topic", "cats")
    r.text(frame(), Piece("end", "hello", ("end", "answer")))
    r.flush_text("end")  # as the engine does when the response node is done
    recorded: list[RunSummary] = []
    events = list(r.ended(r.succeeded(), recorded.append))
    assert [e.name for e in events] == ["workflow_finished", "message_end"]
    summary = recorded[0]
    assert (summary.status, summary.total_steps, summary.answer) == ("succeeded", 1, "hello")
    assert summary.conversation == {"topic": "cats"}
    assert summary.inputs == {"q": f"ask {SECRET}"}  # the session redacts what it stores


def test_a_run_that_cannot_be_recorded_has_failed() -> None:
    r = report(chat=True)

    def broken(summary: RunSummary) -> None:
        raise OSError("disk full")

    events = list(r.ended(r.succeeded(), broken))
    assert isinstance(events[0], ev.WorkflowFailed) and "disk full" in str(events[0].error_message)
    assert isinstance(events[1], ev.ErrorEvent) and r.status == "failed"


@pytest.mark.parametrize("aborted", [True, False])
def test_a_stopped_run_reports_its_reason(aborted: bool) -> None:
    r = report()
    done = r.stopped("interrupted") if aborted else r.failed(TimeoutError("too long"))
    assert done.status == ("stopped" if aborted else "failed")


@pytest.mark.parametrize("shown", [True, False])
def test_message_end_lists_the_knowledge_used_when_the_app_shows_it(shown: bool) -> None:
    r = RunReport(info(chat=True), Redactor(), {}, show_retriever_resources=shown, clock=Clock())
    used = ({"document_name": "a"}, {"document_name": "b"})
    r.node_ended(execution(), Outcome(Status.SUCCEEDED, 1, retriever_resources=used[:1]))
    r.node_ended(execution(), Outcome(Status.SUCCEEDED, 1, retriever_resources=used[1:]))
    end = list(r.ended(r.succeeded(), lambda summary: None))[-1]
    assert isinstance(end, ev.MessageEnd)
    expected = [{"document_name": "a", "position": 1}, {"document_name": "b", "position": 2}]
    assert end.retriever_resources == (expected if shown else [])


def test_a_secret_streamed_in_pieces_is_masked_whole() -> None:
    r = report(chat=True)
    f = frame()
    said = f"key: {SECRET}!"
    chunks = [
        chunk
        for i in range(0, len(said), 3)
        for chunk in r.text(f, Piece("end", said[i : i + 3], ("llm", "text"), "llm", 1))
    ]
    assert all(SECRET[:6] not in c.text for c in chunks)
    held = r.flush_text("llm")  # the source node is done: what was held goes out
    text = "".join(c.text for c in [*chunks, *held])
    assert text == "key: ***!" and r.answer == text
    assert r.flush_text() == []  # nothing twice
