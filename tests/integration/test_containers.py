"""Iteration and loop on the engine's machinery: parallel rounds on real sockets,
error modes, a first-token timeout inside a round, abort, run limits, nested
containers, what the events say about the rounds."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from firstgate.runtime import RunLimits, RunOptions, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute

from tests.fakes import llm_server as fake
from tests.run_events import final


def node(node_id: str, node_type: str, parent: str | None = None, **data: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"id": node_id, "data": {"type": node_type, "title": node_id, **data}}
    if parent is not None:
        found["parentId"] = parent
    return found


def edge(source: str, target: str, handle: str = "source") -> dict[str, Any]:
    return {"source": source, "target": target, "sourceHandle": handle}


def flow(
    nodes: list[dict[str, Any]],
    edges: list[dict[str, Any]],
    conversation: dict[str, tuple[str, Any]] | None = None,
    mode: str = "workflow",
) -> dict[str, Any]:
    variables = [
        {"name": name, "value_type": kind, "value": value, "id": name}
        for name, (kind, value) in (conversation or {}).items()
    ]
    return {
        "version": "0.3.1",
        "kind": "app",
        "app": {"name": "t", "mode": mode},
        "workflow": {
            "conversation_variables": variables,
            "graph": {"nodes": [node("start", "start"), *nodes], "edges": edges},
        },
    }


def iteration(
    node_id: str, items: list[str], output: list[str], **data: Any
) -> list[dict[str, Any]]:
    """An iteration node and its round-start node."""
    return [
        node(
            node_id,
            "iteration",
            iterator_selector=items,
            output_selector=output,
            start_node_id=f"{node_id}start",
            **data,
        ),
        node(f"{node_id}start", "iteration-start", parent=node_id),
    ]


def template(node_id: str, text: str, parent: str | None, **names: list[str]) -> dict[str, Any]:
    variables = [{"variable": k, "value_selector": v} for k, v in names.items()]
    return node(node_id, "template-transform", parent, template=text, variables=variables)


def llm(node_id: str, parent: str | None, prompt: str, **data: Any) -> dict[str, Any]:
    model = {"provider": "fake", "name": "m", "mode": "chat", "completion_params": {}}
    return node(
        node_id,
        "llm",
        parent,
        model=model,
        prompt_template=[{"role": "user", "text": prompt}],
        **data,
    )


def end(**outputs: list[str]) -> dict[str, Any]:
    return node(
        "end", "end", outputs=[{"variable": k, "value_selector": v} for k, v in outputs.items()]
    )


def routes(server: fake.FakeLLMServer) -> RuntimeSettings:
    route = ProviderRoute(kind="openai-compatible", base_url=server.base_url, probe="off")
    return RuntimeSettings(providers={"fake": route})


WORDS = ("ant", "bee", "cat", "dog")


def words_flow(
    inner: list[dict[str, Any]], inner_edges: list[dict[str, Any]], output: list[str], **data: Any
) -> dict[str, Any]:
    return flow(
        [
            *iteration("it", ["conversation", "words"], output, **data),
            *inner,
            end(out=["it", "output"]),
        ],
        [edge("start", "it"), *inner_edges, edge("it", "end")],
        conversation={"words": ("array[string]", list(WORDS))},
    )


# ---- events


def test_the_events_of_a_round_name_the_container_and_the_round() -> None:
    doc = words_flow(
        [template("up", "{{ w | upper }}", "it", w=["it", "item"])],
        [edge("itstart", "up")],
        ["up", "output"],
    )
    events = list(load_workflow(doc).run({}))
    assert final(events).outputs == {"out": ["ANT", "BEE", "CAT", "DOG"]}
    inner = [e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "up"]
    assert [e.to_dict()["data"]["iteration_id"] for e in inner] == ["it"] * 4
    assert [e.to_dict()["data"]["execution_metadata"]["iteration_index"] for e in inner] == [
        0,
        1,
        2,
        3,
    ]
    assert [e.to_dict()["data"]["loop_id"] for e in inner] == [None] * 4
    # The same node in four rounds: four executions.
    assert len({e.execution_id for e in inner}) == 4
    started = next(e for e in events if isinstance(e, ev.ContainerStarted)).to_dict()
    assert started["event"] == "iteration_started"
    assert started["data"]["id"] == "it"  # Dify gives the node id
    assert started["data"]["metadata"] == {"iteration_length": 4}
    assert started["data"]["inputs"] == {"iterator_selector": list(WORDS)}
    completed = next(e for e in events if isinstance(e, ev.ContainerCompleted)).to_dict()
    assert completed["event"] == "iteration_completed"
    assert completed["data"]["status"] == "succeeded"
    assert completed["data"]["steps"] == 4
    assert completed["data"]["outputs"] == {"output": ["ANT", "BEE", "CAT", "DOG"]}
    assert set(completed["data"]["execution_metadata"]["iteration_duration_map"]) == {
        "0", "1", "2", "3"
    }  # fmt: skip
    nexts = [e.to_dict() for e in events if isinstance(e, ev.ContainerNext)]
    assert [n["data"]["index"] for n in nexts] == [0, 1, 2, 3]
    assert nexts[1]["data"]["pre_iteration_output"] == "ANT"
    # Neither node_started nor node_finished for the container itself (as in Dify).
    assert not [
        e for e in events if isinstance(e, ev.NodeStarted | ev.NodeFinished) and e.node_id == "it"
    ]
    # Steps count the rounds' nodes: start, 4 templates, end (plus the iteration).
    assert final(events).total_steps == 7


def test_an_empty_iteration_outputs_an_empty_list() -> None:
    doc = flow(
        [
            *iteration("it", ["conversation", "none"], ["up", "output"]),
            template("up", "{{ w }}", "it", w=["it", "item"]),
            end(out=["it", "output"]),
        ],
        [edge("start", "it"), edge("itstart", "up"), edge("it", "end")],
        conversation={"none": ("array[string]", [])},
    )
    events = list(load_workflow(doc).run({}))
    assert final(events).outputs == {"out": []}
    assert not [e for e in events if isinstance(e, ev.ContainerNext)]


def test_an_older_iteration_without_a_start_node_runs_from_its_first_node() -> None:
    # Exports from before `iteration-start`: `start_node_id` names the first inner node.
    doc = flow(
        [
            node(
                "it",
                "iteration",
                iterator_selector=["conversation", "words"],
                output_selector=["b", "output"],
                start_node_id="a",
            ),
            {**template("a", "{{ w }}", "it", w=["it", "item"]), "isIterationStart": True},
            template("b", "{{ w }}-{{ i }}", "it", w=["a", "output"], i=["it", "index"]),
            end(out=["it", "output"]),
        ],
        [edge("start", "it"), edge("a", "b"), edge("it", "end")],
        conversation={"words": ("array[string]", list(WORDS))},
    )
    assert final(list(load_workflow(doc).run({}))).outputs == {
        "out": [f"{w}-{i}" for i, w in enumerate(WORDS)]
    }


def test_an_iteration_over_something_not_a_list_fails_clearly() -> None:
    doc = flow(
        [
            *iteration("it", ["start", "text"], ["up", "output"]),
            template("up", "{{ w }}", "it", w=["it", "item"]),
            end(out=["it", "output"]),
        ],
        [edge("start", "it"), edge("itstart", "up"), edge("it", "end")],
    )
    doc["workflow"]["graph"]["nodes"][0]["data"]["variables"] = [
        {"variable": "text", "label": "t", "type": "text-input"}
    ]
    events = list(load_workflow(doc).run({"text": "abc"}))
    done = final(events)
    assert isinstance(done, ev.WorkflowFailed)
    assert "start.text" in (done.error_message or "") and "str" in (done.error_message or "")
    completed = next(e for e in events if isinstance(e, ev.ContainerCompleted))
    assert completed.status == "failed"


# ---- parallel rounds on real sockets


def test_parallel_rounds_run_at_once_and_keep_the_items_order() -> None:
    # Every request waits until four are in flight: only truly parallel rounds pass.
    barrier = threading.Barrier(len(WORDS), timeout=10)

    def reply(request: fake.RecordedRequest) -> fake.Scenario:
        word = next(w for w in WORDS if w.encode() in request.body)
        barrier.wait()
        # The last item finishes first: the outputs keep the items' order anyway.
        return fake.tokens([word.upper(), "!"], interval=0.02 * (len(WORDS) - WORDS.index(word)))

    doc = words_flow(
        [llm("ask", "it", "say {{#it.item#}}")],
        [edge("itstart", "ask")],
        ["ask", "text"],
        is_parallel=True,
        parallel_nums=4,
    )
    with fake.FakeLLMServer(fake.routed(reply)) as server:
        events = list(load_workflow(doc).run({}, settings=routes(server)))
        assert not server.errors
    assert final(events).outputs == {"out": ["ANT!", "BEE!", "CAT!", "DOG!"]}
    finished = [e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "ask"]
    assert sorted(
        e.to_dict()["data"]["execution_metadata"]["iteration_index"] for e in finished
    ) == [0, 1, 2, 3]


def test_parallel_nums_bounds_the_rounds_at_once() -> None:
    in_flight = 0
    most = 0
    lock = threading.Lock()

    def reply(request: fake.RecordedRequest) -> fake.Scenario:
        def run(conn: fake.Conn) -> None:
            nonlocal in_flight, most
            with lock:
                in_flight += 1
                most = max(most, in_flight)
            try:
                conn.sleep(0.05)
                fake.tokens(["x"])(conn)
            finally:
                with lock:
                    in_flight -= 1

        return run

    doc = words_flow(
        [llm("ask", "it", "say {{#it.item#}}")],
        [edge("itstart", "ask")],
        ["ask", "text"],
        is_parallel=True,
        parallel_nums=2,
    )
    with fake.FakeLLMServer(fake.routed(reply)) as server:
        events = list(load_workflow(doc).run({}, settings=routes(server)))
    assert final(events).outputs == {"out": ["x"] * 4}
    assert most <= 2


# ---- errors inside rounds


def failing_on_cat(**data: Any) -> dict[str, Any]:
    """Rounds whose model call fails for `cat` (a 400: not retried, no fallback)."""
    return words_flow(
        [llm("ask", "it", "say {{#it.item#}}", **data)],
        [edge("itstart", "ask")],
        ["ask", "text"],
    )


def cat_fails(request: fake.RecordedRequest) -> fake.Scenario:
    if b"cat" in request.body:
        return fake.http_error(400, {"error": {"message": "no cats"}})
    word = next(w for w in WORDS if w.encode() in request.body)
    return fake.tokens([word])


@pytest.mark.parametrize(
    ("mode", "output"),
    [
        ("continue-on-error", ["ant", "bee", None, "dog"]),
        ("remove-abnormal-output", ["ant", "bee", "dog"]),
    ],
)
def test_error_handle_modes_that_go_on(mode: str, output: list[Any]) -> None:
    doc = failing_on_cat()
    doc["workflow"]["graph"]["nodes"][1]["data"]["error_handle_mode"] = mode
    with fake.FakeLLMServer(fake.routed(cat_fails)) as server:
        events = list(load_workflow(doc).run({}, settings=routes(server)))
    assert final(events).outputs == {"out": output}
    failed = [e for e in events if isinstance(e, ev.NodeFailed)]
    assert [e.node_id for e in failed] == ["ask"]
    assert failed[0].container is not None and failed[0].container.index == 2


def test_terminated_fails_the_iteration_with_the_rounds_error_and_runs_no_more_rounds() -> None:
    doc = failing_on_cat()
    with fake.FakeLLMServer(fake.routed(cat_fails)) as server:
        events = list(load_workflow(doc).run({}, settings=routes(server)))
        asked = [r.body for r in server.requests]
    done = final(events)
    assert isinstance(done, ev.WorkflowFailed)
    assert done.error_type == "BadRequestError"
    assert not any(b"dog" in body for body in asked)  # no round after the failed one
    completed = next(e for e in events if isinstance(e, ev.ContainerCompleted))
    assert completed.status == "failed" and completed.error_type == "BadRequestError"


def test_terminated_in_parallel_stops_the_rounds_still_running() -> None:
    def reply(request: fake.RecordedRequest) -> fake.Scenario:
        if b"cat" in request.body:
            return fake.withhold_headers(0.2, fake.http_error(400, {"error": {"message": "no"}}))
        return fake.headers_then_silence(30)  # the others never answer

    doc = failing_on_cat()
    doc["workflow"]["graph"]["nodes"][1]["data"].update(is_parallel=True, parallel_nums=4)
    started = time.monotonic()
    with fake.FakeLLMServer(fake.routed(reply)) as server:
        events = list(load_workflow(doc).run({}, settings=routes(server)))
    assert time.monotonic() - started < 10  # not the 30 s the others would take
    stopped = [e for e in events if isinstance(e, ev.NodeStopped)]
    assert sorted(e.container.index for e in stopped if e.container) == [0, 1, 3]
    assert all(e.error_type == "StreamCancelledError" for e in stopped)
    assert isinstance(final(events), ev.WorkflowFailed)


def test_the_iterations_own_error_strategy_takes_its_failure() -> None:
    doc = failing_on_cat()
    it = doc["workflow"]["graph"]["nodes"][1]["data"]
    it.update(
        error_strategy="default-value",
        default_value=[{"key": "output", "type": "array[string]", "value": ["none"]}],
    )
    with fake.FakeLLMServer(fake.routed(cat_fails)) as server:
        events = list(load_workflow(doc).run({}, settings=routes(server)))
    assert isinstance(final(events), ev.WorkflowPartialSucceeded)
    assert final(events).outputs == {"out": ["none"]}


def test_a_first_token_timeout_in_a_round_follows_the_nodes_strategy_then_the_iterations() -> None:
    def reply(request: fake.RecordedRequest) -> fake.Scenario:
        if b"cat" in request.body:
            return fake.headers_then_silence(30)
        word = next(w for w in WORDS if w.encode() in request.body)
        return fake.tokens([word])

    budget = {"first_token_timeout_ms": 300}
    # The node's own default value first: the round succeeds with it.
    doc = failing_on_cat(
        invocation=budget,
        error_strategy="default-value",
        default_value=[{"key": "text", "type": "string", "value": "(late)"}],
    )
    with fake.FakeLLMServer(fake.routed(reply)) as server:
        events = list(load_workflow(doc).run({}, settings=routes(server)))
    assert final(events).outputs == {"out": ["ant", "bee", "(late)", "dog"]}
    late = next(e for e in events if isinstance(e, ev.NodeException))
    assert late.error_type == "FirstTokenTimeoutError"
    # Without one, the iteration's error mode decides.
    doc = failing_on_cat(invocation=budget)
    doc["workflow"]["graph"]["nodes"][1]["data"]["error_handle_mode"] = "continue-on-error"
    with fake.FakeLLMServer(fake.routed(reply)) as server:
        events = list(load_workflow(doc).run({}, settings=routes(server)))
    assert final(events).outputs == {"out": ["ant", "bee", None, "dog"]}
    failed = next(e for e in events if isinstance(e, ev.NodeFailed))
    assert failed.error_type == "FirstTokenTimeoutError"


# ---- abort and limits


@pytest.mark.parametrize("parallel", [True, False])
def test_abort_cancels_every_running_round_within_a_second(parallel: bool) -> None:
    doc = words_flow(
        [llm("ask", "it", "say {{#it.item#}}")],
        [edge("itstart", "ask")],
        ["ask", "text"],
        is_parallel=parallel,
        parallel_nums=4,
    )
    running = 4 if parallel else 1
    with fake.FakeLLMServer(fake.headers_then_silence(30)) as server:
        run = load_workflow(doc).run({}, settings=routes(server))
        events: list[ev.Event] = []
        aborted_at = 0.0
        for event in run:
            events.append(event)
            started = [e for e in events if isinstance(e, ev.NodeStarted) and e.node_id == "ask"]
            if len(started) == running and not aborted_at:
                time.sleep(0.2)  # the requests are out, the streams silent
                aborted_at = time.monotonic()
                run.abort("test abort")
        after_abort = time.monotonic() - aborted_at
    assert after_abort < 1.0
    stopped = [e for e in events if isinstance(e, ev.NodeStopped)]
    assert len(stopped) == running
    assert all(e.error_type == "StreamCancelledError" for e in stopped)
    completed = next(e for e in events if isinstance(e, ev.ContainerCompleted))
    assert completed.status == "stopped"
    assert events.index(completed) > max(events.index(e) for e in stopped)
    assert isinstance(final(events), ev.WorkflowStopped)


def test_the_step_limit_counts_the_rounds_nodes() -> None:
    doc = words_flow(
        [template("up", "{{ w }}", "it", w=["it", "item"])],
        [edge("itstart", "up")],
        ["up", "output"],
    )
    events = list(load_workflow(doc).run({}, RunOptions(limits=RunLimits(max_steps=4))))
    done = final(events)
    assert isinstance(done, ev.WorkflowFailed)
    assert done.error_type == "LimitExceededError"


# ---- loops


def loop(
    node_id: str, count: int, variables: list[dict[str, Any]], **data: Any
) -> list[dict[str, Any]]:
    return [
        node(
            node_id,
            "loop",
            loop_count=count,
            loop_variables=variables,
            start_node_id=f"{node_id}start",
            logical_operator="and",
            **data,
        ),
        node(f"{node_id}start", "loop-start", parent=node_id),
    ]


def add(
    node_id: str, parent: str, target: list[str], value: Any, operation: str = "+=", **extra: Any
) -> dict[str, Any]:
    item = {
        "variable_selector": target,
        "operation": operation,
        "input_type": "constant",
        "value": value,
        **extra,
    }
    return node(node_id, "assigner", parent, version="2", items=[item])


def test_a_loop_end_inside_a_branch_ends_the_loop() -> None:
    total = {"label": "total", "var_type": "number", "value_type": "constant", "value": 0}
    condition = {"variable_selector": ["lp", "total"], "comparison_operator": "≥", "value": "3"}
    doc = flow(
        [
            *loop("lp", 50, [total]),
            add("inc", "lp", ["lp", "total"], 1),
            node("check", "if-else", "lp", cases=[{"case_id": "done", "conditions": [condition]}]),
            node("stop", "loop-end", "lp"),
            end(total=["lp", "total"], rounds=["lp", "loop_round"]),
        ],
        [
            edge("start", "lp"),
            edge("lpstart", "inc"),
            edge("inc", "check"),
            edge("check", "stop", "done"),
            edge("lp", "end"),
        ],
    )
    events = list(load_workflow(doc).run({}))
    assert final(events).outputs == {"total": 3, "rounds": 3}
    completed = next(e for e in events if isinstance(e, ev.ContainerCompleted))
    assert completed.execution_metadata["completed_reason"] == "loop_break"
    ends = [e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "stop"]
    assert len(ends) == 1 and ends[0].to_dict()["data"]["loop_id"] == "lp"


def test_a_loop_runs_loop_count_rounds_at_most_and_breaks_before_the_first_when_told() -> None:
    word = {"label": "word", "var_type": "string", "value_type": "constant", "value": ""}
    doc = flow(
        [
            *loop("lp", 3, [word]),
            node(
                "grow",
                "assigner",
                "lp",
                version="2",
                items=[
                    {
                        "variable_selector": ["lp", "word"],
                        "operation": "over-write",
                        "input_type": "variable",
                        "value": ["more", "output"],
                    }
                ],
            ),
            template("more", "{{ w }}a", "lp", w=["lp", "word"]),
            end(word=["lp", "word"], rounds=["lp", "loop_round"]),
        ],
        [edge("start", "lp"), edge("lpstart", "more"), edge("more", "grow"), edge("lp", "end")],
    )
    events = list(load_workflow(doc).run({}))
    assert final(events).outputs == {"word": "aaa", "rounds": 3}
    completed = next(e for e in events if isinstance(e, ev.ContainerCompleted))
    assert completed.execution_metadata["completed_reason"] == "loop_completed"
    # A break condition that holds at the start: no round at all.
    loop_data = doc["workflow"]["graph"]["nodes"][1]["data"]
    loop_data["break_conditions"] = [
        {"variable_selector": ["lp", "word"], "comparison_operator": "empty", "value": ""}
    ]
    events = list(load_workflow(doc).run({}))
    assert final(events).outputs == {"word": "", "rounds": 0}
    assert not [e for e in events if isinstance(e, ev.NodeStarted) and e.node_id == "grow"]


def test_loop_variables_from_selectors_and_typed_constants() -> None:
    variables = [
        {"label": "seen", "var_type": "array[string]", "value_type": "constant", "value": '["x"]'},
        {"label": "cfg", "var_type": "object", "value_type": "constant", "value": '{"step": 2}'},
        {"label": "flag", "var_type": "boolean", "value_type": "constant", "value": True},
        {
            "label": "from_input",
            "var_type": "string",
            "value_type": "variable",
            "value": ["start", "text"],
        },
    ]
    doc = flow(
        [
            *loop("lp", 1, variables),
            add("keep", "lp", ["lp", "seen"], "y", operation="append"),
            end(
                seen=["lp", "seen"],
                cfg=["lp", "cfg"],
                flag=["lp", "flag"],
                text=["lp", "from_input"],
            ),
        ],
        [edge("start", "lp"), edge("lpstart", "keep"), edge("lp", "end")],
    )
    doc["workflow"]["graph"]["nodes"][0]["data"]["variables"] = [
        {"variable": "text", "label": "t", "type": "text-input"}
    ]
    events = list(load_workflow(doc).run({"text": "hello"}))
    assert final(events).outputs == {
        "seen": ["x", "y"],
        "cfg": {"step": 2},
        "flag": True,
        "text": "hello",
    }


def test_a_loop_variable_that_does_not_fit_its_type_fails_the_loop_by_name() -> None:
    bad = {"label": "n", "var_type": "number", "value_type": "constant", "value": "many"}
    doc = flow(
        [*loop("lp", 2, [bad]), add("inc", "lp", ["lp", "n"], 1), end(n=["lp", "n"])],
        [edge("start", "lp"), edge("lpstart", "inc"), edge("lp", "end")],
    )
    done = final(list(load_workflow(doc).run({})))
    assert isinstance(done, ev.WorkflowFailed)
    assert "n" in (done.error_message or "") and "number" in (done.error_message or "")


def test_nested_an_iteration_inside_a_loop_writes_the_loops_variable() -> None:
    # Each loop round iterates over the words and appends each to the loop's list.
    collected = {
        "label": "all",
        "var_type": "array[string]",
        "value_type": "constant",
        "value": "[]",
    }
    doc = flow(
        [
            *loop("lp", 2, [collected]),
            *[
                dict(n, parentId="lp") if n["id"] == "it" else n
                for n in iteration("it", ["conversation", "words"], ["up", "output"])
            ],
            node(
                "keep",
                "assigner",
                "it",
                version="2",
                items=[
                    {
                        "variable_selector": ["lp", "all"],
                        "operation": "append",
                        "input_type": "variable",
                        "value": ["it", "item"],
                    }
                ],
            ),
            template("up", "{{ w }}", "it", w=["it", "item"]),
            end(all=["lp", "all"]),
        ],
        [
            edge("start", "lp"),
            edge("lpstart", "it"),
            edge("itstart", "keep"),
            edge("keep", "up"),
            edge("lp", "end"),
        ],
        conversation={"words": ("array[string]", ["a", "b"])},
    )
    events = list(load_workflow(doc).run({}))
    assert final(events).outputs == {"all": ["a", "b", "a", "b"]}
    # The inner iteration's events name the iteration; the iteration's own events
    # (inside the loop) are the loop's.
    keeps = [e for e in events if isinstance(e, ev.NodeSucceeded) and e.node_id == "keep"]
    assert {e.to_dict()["data"]["iteration_id"] for e in keeps} == {"it"}
    its = [e for e in events if isinstance(e, ev.ContainerCompleted) and e.node_id == "it"]
    assert [e.container.index for e in its if e.container] == [0, 1]


def test_an_answer_in_a_round_waits_for_the_assigner_that_writes_what_it_shows() -> None:
    # The answer follows the assigner (the shape of Dify's streaming fixtures)
    # and shows the conversation variable it writes: each round streams its own
    # value, never the one before (issue 10's rule, kept inside containers).
    setter = add("put", "it", ["conversation", "said"], None, "over-write")
    setter["data"]["items"][0].update({"input_type": "variable", "value": ["it", "item"]})
    doc = flow(
        [
            *iteration("it", ["conversation", "words"], ["say", "answer"]),
            setter,
            node("say", "answer", "it", answer="[{{#conversation.said#}}]"),
        ],
        [edge("start", "it"), edge("itstart", "put"), edge("put", "say")],
        conversation={"words": ("array[string]", list(WORDS)), "said": ("string", "none")},
        mode="advanced-chat",
    )
    events = list(load_workflow(doc).run({}, RunOptions(query="go")))
    assert isinstance(final(events), ev.WorkflowSucceeded)
    text = "".join(e.text for e in events if isinstance(e, ev.TextChunk))
    assert text == "".join(f"[{w}]" for w in WORDS)


def test_a_version_1_assigner_appends_to_a_loop_variable() -> None:
    seen = {"label": "seen", "var_type": "array[string]", "value_type": "constant", "value": ""}
    doc = flow(
        [
            *loop("lp", 3, [seen]),
            template("word", "w{{ n | length }}", "lp", n=["lp", "seen"]),
            node(
                "keep",
                "assigner",
                "lp",
                assigned_variable_selector=["lp", "seen"],
                input_variable_selector=["word", "output"],
                write_mode="append",
            ),
            end(seen=["lp", "seen"]),
        ],
        [edge("start", "lp"), edge("lpstart", "word"), edge("word", "keep"), edge("lp", "end")],
    )
    # Each round sees the list the round before left.
    assert final(list(load_workflow(doc).run({}))).outputs == {"seen": ["w0", "w1", "w2"]}


def test_a_node_in_a_round_retries_on_its_own_and_its_retry_names_the_round() -> None:
    asked: list[str] = []

    def reply(request: fake.RecordedRequest) -> fake.Scenario:
        word = next(w for w in WORDS if w.encode() in request.body)
        asked.append(word)
        if word == "bee" and asked.count("bee") == 1:
            return fake.http_error(503)  # transient: retried
        return fake.tokens([word])

    retry = {"retry_enabled": True, "max_retries": 2, "retry_interval": 10}
    doc = words_flow(
        [llm("ask", "it", "say {{#it.item#}}", retry_config=retry)],
        [edge("itstart", "ask")],
        ["ask", "text"],
    )
    with fake.FakeLLMServer(fake.routed(reply)) as server:
        events = list(load_workflow(doc).run({}, settings=routes(server)))
    assert final(events).outputs == {"out": list(WORDS)}
    (retried,) = [e for e in events if isinstance(e, ev.NodeRetry)]
    data = retried.to_dict()["data"]
    assert (data["node_id"], data["iteration_id"], data["retry_index"]) == ("ask", "it", 1)
    assert asked.count("bee") == 2 and asked.count("ant") == 1
