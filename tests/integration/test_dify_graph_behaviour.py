"""What Dify's graph-engine tests check, on flows written for this project
(`tests/flows/`, the same shapes as Dify's fixtures; no Dify file is copied):
expected answers and outputs, and text streamed in Dify's order relative to
the node events. Models are the raw-socket fake server; each flow's prompts
carry a `reply: NAME` marker that picks what the fake streams.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from firstgate.runtime import RunOptions, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute

from tests.fakes import llm_server as fake
from tests.run_events import final

FLOWS = Path(__file__).resolve().parents[1] / "flows"

REPLIES: dict[str, list[str]] = {
    "two": ["mocked ", "model ", "text"],
    "templated": ["via ", "template"],
    "direct": ["straight ", "to ", "the ", "end"],
    "english": ["Hello", ", ", "I am", " a model."],
    "german": ["Hallo", ", ", "ich bin", " ein Modell."],
    "first": ["one", "-", "two"],
    "second": ["three", "-", "four"],
    "opening": ["Initial ", "stream"],
    "primary": ["Primary ", "stream ", "output"],
    "secondary": ["Secondary"],
}
DELAYS = {"english": 0.05, "german": 0.01, "first": 0.02, "second": 0.02}
MARKER = re.compile(rb"reply: (\w+)")


def _reply(request: fake.RecordedRequest) -> fake.Scenario:
    found = MARKER.search(request.body)
    name = found.group(1).decode() if found else "two"
    return fake.tokens(REPLIES[name], interval=DELAYS.get(name, 0.0))


def settings(server: fake.FakeLLMServer) -> RuntimeSettings:
    # Named by the short provider name: the flows say `openai` or `langgenius/openai/openai`.
    route = ProviderRoute(kind="openai-compatible", base_url=server.base_url, probe="off")
    return RuntimeSettings(providers={"openai": route})


def run_flow(
    name: str,
    inputs: dict[str, Any] | None = None,
    scenario: fake.Scenario | None = None,
    **kw: Any,
) -> list[ev.Event]:
    workflow = load_workflow(FLOWS / f"{name}.yml")
    with fake.FakeLLMServer(scenario or fake.routed(_reply)) as server:
        return list(workflow.run(inputs or {}, RunOptions(**kw), settings=settings(server)))


def shape(events: list[ev.Event]) -> list[str]:
    """The event sequence in the terms Dify's tests use."""
    names = {
        ev.WorkflowStarted: "GraphRunStarted",
        ev.NodeStarted: "NodeRunStarted",
        ev.TextChunk: "NodeRunStreamChunk",
        ev.NodeSucceeded: "NodeRunSucceeded",
        ev.WorkflowSucceeded: "GraphRunSucceeded",
    }
    return [names[type(e)] for e in events if type(e) in names]


def chunks(events: list[ev.Event]) -> list[ev.TextChunk]:
    return [e for e in events if isinstance(e, ev.TextChunk)]


def index_of(events: list[ev.Event], kind: type[ev.Event], node_id: str) -> int:
    return next(i for i, e in enumerate(events) if isinstance(e, kind) and e.node_id == node_id)  # type: ignore[attr-defined]


def test_literal_text_and_sys_query_stream_while_the_start_node_finishes() -> None:
    events = run_flow("greeting_around_query", query="Hello, AI!")
    assert final(events).outputs == {"answer": ">> Hello, AI! <<"}
    assert shape(events) == [
        "GraphRunStarted",
        "NodeRunStarted",  # start
        "NodeRunStreamChunk",  # ">> "
        "NodeRunStreamChunk",  # sys.query
        "NodeRunStreamChunk",  # " <<"
        "NodeRunSucceeded",  # start
        "NodeRunStarted",  # the answer
        "NodeRunSucceeded",
        "GraphRunSucceeded",
    ]
    assert [c.text for c in chunks(events)] == [">> ", "Hello, AI!", " <<"]
    assert [c.from_variable_selector for c in chunks(events)] == [
        ["reply", "answer"],
        ["sys", "query"],
        ["reply", "answer"],
    ]
    assert isinstance(events[-1], ev.MessageEnd) and events[-1].answer == ">> Hello, AI! <<"


def test_answers_stream_in_graph_order_and_add_up() -> None:
    events = run_flow("two_answers_after_a_model", query="go")
    expected = "== one ==\n\nfixed\n== two ==\n\nmocked model text\n"
    assert final(events).outputs == {"answer": expected}
    assert "".join(c.text for c in chunks(events)) == expected
    # The first answer needs nothing from the model: it is out before the model finishes.
    first_answer = [events.index(c) for c in chunks(events) if c.node_id == "300"]
    assert [c.text for c in chunks(events) if c.node_id == "300"] == ["== one ==\n\nfixed\n"]
    assert max(first_answer) < index_of(events, ev.NodeSucceeded, "200")


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        ("hello world", "saw hello.mocked model text"),
        ("say hello to everyone", "saw hello.mocked model text"),
        ("goodbye world", "mocked model text"),
    ],
)
def test_an_answer_with_two_ways_in_runs_when_either_is_taken(query: str, answer: str) -> None:
    events = run_flow("branch_beside_model", query=query)
    assert final(events).outputs == {"answer": answer}
    started = {e.node_id for e in events if isinstance(e, ev.NodeStarted)}
    assert {"check", "model", "model_answer"} <= started
    assert ("hello_answer" in started) == ("hello" in query)
    model_started = index_of(events, ev.NodeStarted, "model")
    streamed = chunk_positions(events, "model")
    assert streamed and min(streamed) > model_started


def test_through_a_template_the_end_node_streams_exactly_three_chunks() -> None:
    events = run_flow("ordered_vs_templated_output", {"query": "Hi, how are you?", "mode": 1})
    assert final(events).outputs == {"query": "Hi, how are you?", "text": "via template"}
    pieces = chunks(events)
    assert [c.text for c in pieces] == ["Hi, how are you?", "\n", "via template"]
    # The query is the start node's, the newline the end node's, the text the template's.
    assert [c.from_variable_selector for c in pieces] == [
        ["begin", "query"],
        ["end_a", "answer"],
        ["shape", "output"],
    ]
    assert [c.source_node_id for c in pieces] == ["begin", None, "shape"]
    first_chunk = events.index(pieces[0])
    assert first_chunk < index_of(events, ev.NodeSucceeded, "llm_a")


def test_straight_to_the_end_node_the_model_streams_token_by_token() -> None:
    events = run_flow("ordered_vs_templated_output", {"query": "Hi, how are you?", "mode": 2})
    pieces = chunks(events)
    assert [c.text for c in pieces[:2]] == ["Hi, how are you?", "\n"]
    assert [c.text for c in pieces[2:]] == REPLIES["direct"]
    assert all(c.source_node_id == "llm_b" for c in pieces[2:])
    assert events.index(pieces[0]) < index_of(events, ev.NodeSucceeded, "llm_b")
    assert events.index(pieces[-1]) < index_of(events, ev.NodeSucceeded, "llm_b")


def chunk_positions(events: list[ev.Event], source: str) -> list[int]:
    """Where the text chunks streamed by node `source` stand among the events."""
    return [
        i
        for i, e in enumerate(events)
        if isinstance(e, ev.TextChunk) and e.source_node_id == source
    ]


def test_parallel_models_stream_in_the_templates_order() -> None:
    events = run_flow("two_models_in_template_order", query="Tell me about yourself")
    expected = "".join(REPLIES["german"]) + "".join(REPLIES["english"])
    assert final(events).outputs == {"answer": expected}
    german = chunk_positions(events, "german")
    english = chunk_positions(events, "english")
    assert len(german) == len(REPLIES["german"]) and len(english) == len(REPLIES["english"])
    assert max(german) < min(english)
    assert max(english) < index_of(events, ev.NodeStarted, "out")  # all out before the answer runs


def test_text_of_an_earlier_model_shown_later_is_held_until_its_turn() -> None:
    events = run_flow("later_model_shown_first", query="poems")
    first, second = "".join(REPLIES["first"]), "".join(REPLIES["second"])
    expected = f"## second\n\n{second}\n\n## first\n\n{first}"
    assert final(events).outputs == {"answer": expected}
    assert "".join(c.text for c in chunks(events)) == expected
    # "first" ran (and finished) before "second" started, yet none of its text
    # went out before "second"'s text was complete.
    first_done = index_of(events, ev.NodeSucceeded, "first")
    first_chunks = chunk_positions(events, "first")
    second_chunks = chunk_positions(events, "second")
    assert min(first_chunks) > first_done and min(first_chunks) > max(second_chunks)
    assert len(first_chunks) == len(REPLIES["first"])  # held, then sent chunk by chunk


@pytest.mark.parametrize("branch", ["primary", "secondary"])
def test_text_held_for_an_undecided_branch_goes_out_when_it_chooses(branch: str) -> None:
    events = run_flow("model_then_branch_to_ends", {"branch": branch})
    own = f"llm_{branch}"
    assert [e.node_id for e in events if isinstance(e, ev.NodeStarted)] == [
        "start",
        "opening",
        "route",
        own,
        f"end_{branch}",
    ]
    pieces = chunks(events)
    assert [(c.source_node_id or c.node_id, c.text) for c in pieces] == [
        *(("opening", t) for t in REPLIES["opening"]),
        (f"end_{branch}", "\n"),
        *((own, t) for t in REPLIES[branch]),
    ]
    route_started = index_of(events, ev.NodeStarted, "route")
    route_done = index_of(events, ev.NodeSucceeded, "route")
    held = [events.index(c) for c in pieces[: len(REPLIES["opening"]) + 1]]
    assert held == list(range(route_started + 1, route_done))
    live = [events.index(c) for c in pieces[len(held) :]]
    assert index_of(events, ev.NodeStarted, own) < min(live)
    assert max(live) < index_of(events, ev.NodeSucceeded, own)


@pytest.mark.parametrize("flow", ["remember_last_message", "remember_v1"])
def test_an_answer_waits_for_the_assigner_that_writes_what_it_shows(flow: str) -> None:
    events = run_flow(flow, query="Hello, this is my test query")
    if flow == "remember_v1":
        assert final(events).outputs == {"answer": "note is:Hello, this is my test query"}
        assert shape(events) == [
            "GraphRunStarted",
            "NodeRunStarted",  # start
            "NodeRunSucceeded",
            "NodeRunStarted",  # the assigner
            "NodeRunStreamChunk",  # "note is:"
            "NodeRunStreamChunk",  # the variable, already written
            "NodeRunSucceeded",
            "NodeRunStarted",  # the answer
            "NodeRunSucceeded",
            "GraphRunSucceeded",
        ]
        return
    text = "".join(c.text for c in chunks(events))
    assert text == "before: nothing yet (0 turns)\nnow: Hello, this is my test query"
    assert final(events).outputs["answer"] == text
    keep_done = index_of(events, ev.NodeSucceeded, "keep")
    now_chunks = [events.index(c) for c in chunks(events) if c.node_id == "now"]
    assert (
        min(now_chunks) > index_of(events, ev.NodeStarted, "keep") and max(now_chunks) < keep_done
    )


def test_an_end_output_without_value_type_streams_while_the_start_finishes() -> None:
    events = run_flow("echo_input_to_end", {"query": "test query"})
    assert final(events).outputs == {"query": "test query"}
    assert shape(events) == [
        "GraphRunStarted",
        "NodeRunStarted",
        "NodeRunStreamChunk",
        "NodeRunSucceeded",
        "NodeRunStarted",
        "NodeRunSucceeded",
        "GraphRunSucceeded",
    ]


@pytest.mark.parametrize(
    ("one", "two", "expected"),
    [
        (0, 0, ("switch 1 off", "switch 2 off")),
        (0, 1, ("switch 1 off", "switch 2 on")),
        (1, 0, ("switch 1 on", "switch 2 off")),
        (1, 1, ("switch 1 on", "switch 2 on")),
    ],
)
def test_an_aggregator_in_group_mode_takes_each_groups_branch(
    one: int, two: int, expected: tuple[str, str]
) -> None:
    events = run_flow("two_switches_grouped", {"switch1": one, "switch2": two})
    assert final(events).outputs == {"group1": expected[0], "group2": expected[1]}


@pytest.mark.parametrize(
    ("query", "answer"), [("hello there", "- produced end"), ("bye", "-  end")]
)
def test_a_node_on_a_branch_not_taken_is_left_out_of_the_answer(query: str, answer: str) -> None:
    events = run_flow("variable_and_maybe_skipped", query=query)
    # The stream waits for the producer (or leaves it out when its branch is not
    # taken). The answer node itself runs straight after the start node, before
    # the producer, so its own output (as in Dify) does not have it.
    assert "".join(c.text for c in chunks(events)) == answer
    assert isinstance(final(events), ev.WorkflowSucceeded)


def test_the_wire_form_of_each_event_is_json() -> None:
    events = run_flow("two_answers_after_a_model", query="go")
    for event in events:
        assert json.loads(json.dumps(event.to_dict()))["event"] == event.to_dict()["event"]


def test_answers_keep_graph_order_whatever_their_ids_and_skip_what_cannot_run() -> None:
    events = run_flow("answers_after_a_model_that_may_fail", query="q")
    expected = "mocked model text -- thanks []"
    assert "".join(c.text for c in chunks(events)) == expected
    assert final(events).outputs == {"answer": expected}
    # "aa_tail" sorts first but comes after "zz_ok" in the graph: its text waits.
    assert [c.node_id for c in chunks(events)][-1] == "aa_tail"


def test_an_answer_that_will_not_run_stops_streaming_at_once() -> None:
    events = run_flow(
        "answers_after_a_model_that_may_fail", query="q", scenario=fake.close_before_token()
    )
    # The first answer's stream was open (nothing blocks it) when the model
    # failed: its literal tail never goes out, the apology does.
    assert "".join(c.text for c in chunks(events)) == "sorry: EmptyResponseError"
    assert final(events).outputs == {"answer": "sorry: EmptyResponseError"}
