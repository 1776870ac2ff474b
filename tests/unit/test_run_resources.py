"""One owner per resource: `RunResources` closes what it opened and nothing it
was handed; a run closes only what it made, and what `Workflow.run` opened for
that run alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from firstgate.nodes.start import InputError
from firstgate.runtime import RunOptions, RunResources, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.execution import resources as resources_module
from firstgate.runtime.models.route_clients import RouteClients
from firstgate.runtime.settings import RuntimeSettings
from firstgate.sandbox.executor import OutputLimits
from firstgate.store import open_store

from tests.run_events import final


class FakeExecutor:
    output_limits = OutputLimits()

    def __init__(self) -> None:
        self.started = self.closed = 0

    def start(self) -> None:
        self.started += 1

    def execute(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("no code runs here")

    def close(self) -> None:
        self.closed += 1


class FakeClients:
    def client_for(self, provider: str) -> Any:
        raise AssertionError("no model in these tests")


FLOW = {
    "kind": "app",
    "app": {"mode": "workflow"},
    "workflow": {
        "graph": {
            "nodes": [
                {
                    "id": "start",
                    "data": {
                        "type": "start",
                        "title": "s",
                        "variables": [{"variable": "q", "type": "text-input", "required": True}],
                    },
                },
                {
                    "id": "end",
                    "data": {
                        "type": "end",
                        "title": "e",
                        "outputs": [{"variable": "q", "value_selector": ["start", "q"]}],
                    },
                },
            ],
            "edges": [{"source": "start", "target": "end"}],
        }
    },
}


CHAT = {
    "kind": "app",
    "app": {"mode": "advanced-chat"},
    "workflow": {
        "graph": {
            "nodes": [
                {"id": "start", "data": {"type": "start", "title": "s"}},
                {
                    "id": "say",
                    "data": {"type": "answer", "title": "a", "answer": "{{#sys.query#}}"},
                },
            ],
            "edges": [{"source": "start", "target": "say"}],
        }
    },
}


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[FakeExecutor]:
    """The executors `RunResources` builds from the settings, as fakes."""
    made: list[FakeExecutor] = []

    def build(settings: Any = None) -> FakeExecutor:
        made.append(FakeExecutor())
        return made[-1]

    monkeypatch.setattr(resources_module, "build_code_executor", build)
    return made


def test_it_closes_what_it_opened(
    built: list[FakeExecutor], monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[RouteClients] = []
    monkeypatch.setattr(RouteClients, "close", lambda routes: closed.append(routes))
    resources = RunResources.open()
    assert resources.routes is not None and resources.clients is resources.routes
    assert not built  # the executor is built on first use, once
    assert resources.code_executor is resources.code_executor and len(built) == 1
    resources.close()
    assert closed == [resources.routes] and built[0].closed == 1


def test_what_it_was_handed_stays_the_callers(tmp_path: Path, built: list[FakeExecutor]) -> None:
    store = open_store(tmp_path / "state.db")
    executor, clients = FakeExecutor(), FakeClients()
    with RunResources.open(store=store, clients=clients, code_executor=executor) as resources:
        assert resources.routes is None and resources.clients is clients
        assert resources.code_executor is executor
    assert executor.closed == 0 and not built
    assert store.run("nothing") is None  # still open
    store.close()


def test_a_run_on_shared_resources_closes_none_of_them(
    tmp_path: Path, built: list[FakeExecutor]
) -> None:
    store = open_store(tmp_path / "state.db")
    workflow = load_workflow(FLOW)
    with RunResources.open(store=store) as resources:
        for text in ("a", "b"):
            events = list(workflow.run({"q": text}, RunOptions(), resources))
            assert final(events).outputs == {"q": text}
            assert store.run(final(events).run.workflow_run_id) is not None  # recorded
        assert len(built) == 1 and built[0].closed == 0
    assert built[0].closed == 1
    store.close()


def test_a_run_given_no_resources_opens_its_own_and_closes_them(
    built: list[FakeExecutor],
) -> None:
    run = load_workflow(FLOW).run({"q": "hi"})
    assert isinstance(final(list(run)), ev.WorkflowSucceeded)
    assert len(built) == 1 and built[0].closed == 1


def test_a_run_that_cannot_start_closes_what_was_opened_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed: list[RouteClients] = []
    monkeypatch.setattr(RouteClients, "close", lambda routes: closed.append(routes))
    workflow = load_workflow(FLOW)
    no_files = RunOptions(files=["notes.txt"])  # the app takes none
    with pytest.raises(InputError):
        workflow.run({"q": "x"}, no_files)
    assert len(closed) == 1  # the resources it opened for the run
    with RunResources.open() as shared:
        with pytest.raises(InputError):
            workflow.run({"q": "x"}, no_files, shared)
        assert len(closed) == 1  # the caller's stay open
    assert len(closed) == 2


def test_a_turn_that_cannot_start_gives_its_conversation_back(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state.db")
    chat = load_workflow(CHAT)
    with RunResources.open(store=store) as resources:
        refused = RunOptions(query="hi", conversation_id="c-1", files=["notes.txt"])
        with pytest.raises(InputError):
            chat.run({}, refused, resources)  # after the conversation was taken
        again = RunOptions(query="again", conversation_id="c-1", turn_wait_s=0.2)
        events = list(chat.run({}, again, resources))  # not kept waiting for the lease
    assert isinstance(final(events), ev.WorkflowSucceeded)
    store.close()


def test_settings_come_with_the_resources_not_beside_them() -> None:
    with RunResources.open() as resources, pytest.raises(TypeError):
        load_workflow(FLOW).run({"q": "x"}, RunOptions(), resources, settings=RuntimeSettings())


def test_a_run_that_is_not_recorded_leaves_no_record(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state.db")
    with RunResources.open(store=store) as resources:
        events = list(load_workflow(FLOW).run({"q": "x"}, RunOptions(recorded=False), resources))
    assert store.run(final(events).run.workflow_run_id) is None
    store.close()
