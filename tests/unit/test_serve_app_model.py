"""`auto_generate` names: the app's model's title, else the first query shortened."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from firstgate.runtime import load_workflow
from firstgate.serve import app_model as naming

from tests.serve_support import APPS


@pytest.fixture(scope="module")
def chat_app() -> SimpleNamespace:
    return SimpleNamespace(workflow=load_workflow(APPS / "chat.yml"))


def _replying(monkeypatch: pytest.MonkeyPatch, text: str) -> list[Any]:
    asked: list[Any] = []

    def invoke(plan: str, request: Any, sinks: Any) -> SimpleNamespace:
        asked.append(request)
        return SimpleNamespace(text=text)

    monkeypatch.setattr(naming, "plan_for", lambda clients, provider: "plan")
    monkeypatch.setattr(naming, "invoke", invoke)
    return asked


def test_the_models_title_shortened_to_the_name_size(
    chat_app: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    _replying(monkeypatch, '  "A trip\n to Lisbon"  ')
    assert naming.generate_name(chat_app, object(), "plan it") == "A trip to Lisbon"
    _replying(monkeypatch, "word " * 40)
    name = naming.generate_name(chat_app, object(), "plan it")
    assert len(name) == naming.NAME_CHARS and name.endswith("...")


def test_the_query_when_the_model_answers_nothing(
    chat_app: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    _replying(monkeypatch, "  \n ")
    assert naming.generate_name(chat_app, object(), "plan   it") == "plan it"


def test_the_query_when_the_model_fails_or_there_is_none(
    chat_app: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    # `object()` has no routes: planning fails (logged), and the query names the conversation.
    with caplog.at_level("WARNING", logger="firstgate.serve"):
        assert naming.generate_name(chat_app, object(), "plan   it") == "plan it"
    assert "asking the app's model" in caplog.text
    caplog.clear()
    # No routes at all is no failure: nothing to log.
    with caplog.at_level("WARNING", logger="firstgate.serve"):
        assert naming.generate_name(chat_app, None, "plan it") == "plan it"
    assert caplog.text == ""
    story = SimpleNamespace(workflow=load_workflow(APPS / "story.yml"))
    assert naming.app_model(story) is not None
    no_model = SimpleNamespace(
        workflow=load_workflow(APPS.parent / "fixtures" / "workflows" / "code_add_one.yml")
    )
    assert naming.app_model(no_model) is None


def test_suggested_questions_from_the_models_json_array(
    chat_app: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = [("hi", "hello")]
    asked = _replying(monkeypatch, 'Sure: ["Where?", "When?", " ", 3, "Why?", "How?"] done')
    # Dify keeps the model's strings as it gave them, however many (it asks for three).
    assert naming.suggest_questions(chat_app, object(), turns) == [
        "Where?",
        "When?",
        "Why?",
        "How?",
    ]
    (request,) = asked
    (message,) = request.messages
    assert message["role"] == "user"
    assert message["content"].startswith("Human: hi\nAssistant: hello\n")
    assert message["content"].endswith("\nquestions:\n")
    assert dict(request.parameters) == {"temperature": 0, "max_tokens": 256}
    _replying(monkeypatch, "no array here")
    assert naming.suggest_questions(chat_app, object(), turns) == []
    _replying(monkeypatch, "[not json]")
    assert naming.suggest_questions(chat_app, object(), turns) == []
    assert naming.suggest_questions(chat_app, None, turns) == []


def test_suggestions_read_the_last_answered_turns_within_a_bound(
    chat_app: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _replying(monkeypatch, "[]")
    turns = [("one", "a1"), ("two", "a2"), ("three", ""), ("four", "a4"), ("five", "a5")]
    assert naming.suggest_questions(chat_app, object(), turns) == []
    prompt = asked[-1].messages[0]["content"]
    # The last three answered turns (Dify's memory reads answered messages only).
    assert "Human: two" in prompt and "Human: four" in prompt and "Human: five" in prompt
    assert "Human: three" not in prompt and "Human: one" not in prompt
    long = "x" * naming.SUGGEST_HISTORY_CHARS
    naming.suggest_questions(chat_app, object(), [("old", long), ("new", "short")])
    prompt = asked[-1].messages[0]["content"]
    # A turn too long for the bound goes whole, not cut in the middle.
    assert "xxx" not in prompt and "Human: new\nAssistant: short" in prompt
    naming.suggest_questions(chat_app, object(), [("only", long * 3)])
    assert len(asked[-1].messages[0]["content"]) < naming.SUGGEST_HISTORY_CHARS + 400
