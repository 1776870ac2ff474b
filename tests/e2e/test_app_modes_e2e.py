"""One easy-mode app of each kind (chat, agent-chat, completion) from the
corpus, on the real llama-server: the compiled graph's model calls go through
the gate to the embedded model, and each app answers as its mode does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from firstgate.connectors.local_index import LocalIndex
from firstgate.runtime import RunOptions, RunResources, load_workflow
from firstgate.runtime.settings import RuntimeSettings
from firstgate.store import open_store

from tests.run_events import final

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def settings(server: Any, index: Path | None = None) -> RuntimeSettings:
    doc: dict[str, Any] = {
        "providers": {"local": {"kind": "openai-compatible", "base_url": server.base_url}},
        "default": "local",
    }
    if index is not None:
        doc["knowledge"] = {"datasets": {"6f1c9a": {"kind": "local", "index": str(index)}}}
    return RuntimeSettings.model_validate(doc)


def knowledge(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "winter.md").write_text("In winter the Canary Islands are warm and sunny.\n")
    path = tmp_path / "kb.sqlite"
    index = LocalIndex(path, create=True)
    index.update(docs)
    index.close()
    return path


def answer(events: list[Any]) -> str:
    return "".join(e.to_dict()["answer"] for e in events if e.to_dict()["event"] == "message")


def test_a_chat_app_holds_a_conversation(llama_server: Any, tmp_path: Path) -> None:
    chosen = settings(llama_server, knowledge(tmp_path))
    workflow = load_workflow(CORPUS / "easy_chat.yml", settings=chosen)
    store = open_store(tmp_path / "state.db")
    inputs = {"name": "Ada", "season": "winter"}
    with RunResources.open(chosen, store=store, loader=load_workflow) as resources:
        first = list(workflow.run(inputs, RunOptions(query="Where is it warm?"), resources))
        conversation = first[0].run.conversation_id
        again = RunOptions(query="Thanks!", conversation_id=conversation)
        second = list(workflow.run(inputs, again, resources))
    for events in (first, second):
        assert final(events).status == "succeeded"
        assert answer(events).strip()
    end = first[-1].to_dict()
    assert end["event"] == "message_end"
    assert end["metadata"]["retriever_resources"][0]["dataset_id"] == "6f1c9a"


def test_an_agent_chat_app_answers(llama_server: Any) -> None:
    workflow = load_workflow(CORPUS / "easy_agent_chat.yml")
    asked = RunOptions(query="What time is it?")
    events = list(workflow.run({}, asked, settings=settings(llama_server)))
    assert final(events).status == "succeeded"
    assert answer(events).strip()
    assert events[-1].to_dict()["event"] == "message_end"


def test_a_completion_app_writes(llama_server: Any, tmp_path: Path) -> None:
    chosen = settings(llama_server, knowledge(tmp_path))
    workflow = load_workflow(CORPUS / "easy_completion.yml", settings=chosen)
    events = list(workflow.run({"product": "a blue mug", "words": 10}, settings=chosen))
    done = final(events)
    assert done.status == "succeeded"
    assert done.outputs["text"].strip()
