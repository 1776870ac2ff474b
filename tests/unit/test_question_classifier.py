"""The question classifier's reading of a model's answer (Dify's rules from
its tests, plus the tolerance a small local model needs) and its prompt."""

from __future__ import annotations

import json

import pytest
from firstgate.nodes import question_classifier as qc
from firstgate.nodes.llm import json_answer
from firstgate.nodes.llm.json_answer import read_json_object

CLASSES = [qc.ClassConfig(id="1", name="Billing"), qc.ClassConfig(id="2", name="Shipping")]
NAMES = ["Billing", "Shipping"]


@pytest.mark.parametrize(
    ("answer", "index"),
    [
        ('{"category_id": "2", "category_name": "Shipping"}', 1),
        ('<think>maybe {"category_id": "1"}</think>{"category_id": "2"}', 1),
        ('Sure!\n```json\n{"category_id": "2", "category_name": "Shipping"}\n```', 1),
        ('{"category_id": "2", "category_name": "Shipping",', 1),  # cut short: repaired
        ('{"category_id": 2}', 1),  # a number where the id is a string
        ('{"category_id": "999", "category_name": "Nope"}', 0),  # no class: the first
        ("{}", 0),
        ('[{"category_id": "2"}]', 1),
        ('{"category_name": "shipping "}', 1),  # the name alone names one class
        ('{"category_id": "999", "category_name": "Shipping"}', 1),
    ],
    ids=[
        "id",
        "think-tags",
        "code-fence",
        "unclosed",
        "numeric-id",
        "unknown-id-first-class",
        "empty-object-first-class",
        "one-element-list",
        "name-only",
        "unknown-id-known-name",
    ],
)
def test_which_class_an_answer_names(answer: str, index: int) -> None:
    assert qc.choose(CLASSES, NAMES, answer) == index


@pytest.mark.parametrize("answer", ["Shipping", "", '<think>{"category_id": "2"}</think>'])
def test_an_answer_without_json_is_a_typed_error(answer: str) -> None:
    with pytest.raises(qc.ClassifierAnswerError) as caught:
        qc.choose(CLASSES, NAMES, answer)
    assert caught.value.message_key == "errors.classifier.noJson"


def test_a_name_shared_by_two_classes_picks_neither() -> None:
    classes = [*CLASSES, qc.ClassConfig(id="3", name="shipping")]
    assert qc.choose(classes, [*NAMES, "shipping"], '{"category_name": "Shipping"}') == 0


def test_the_reader_is_bounded_on_hostile_text() -> None:
    # Many opening braces that never parse: only a bounded number is tried.
    text = "{x" * 200_000
    assert read_json_object(text) is None


def test_only_a_bounded_number_of_openings_is_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    # Deeply nested braces that never parse: every opening starts a span as
    # long as the text, so trying them all would be quadratic.
    tried = 0

    def counting(text: str) -> None:
        nonlocal tried
        tried += 1
        assert tried <= json_answer.MAX_OPENINGS + 2, "an unbounded number of openings"

    monkeypatch.setattr(json_answer, "_loads", counting)
    monkeypatch.setattr(json_answer, "MAX_REPAIR_CHARS", 0)  # the strict reading only
    assert read_json_object("{" * 2000 + "}" * 2000) is None
    assert tried > json_answer.MAX_OPENINGS


def data(mode: str = "chat", instruction: str = "") -> qc.Data:
    return qc.Data.model_validate(
        {
            "type": "question-classifier",
            "query_variable_selector": ["start", "q"],
            "model": {"provider": "p", "name": "m", "mode": mode},
            "classes": [{"id": "1", "name": "Billing"}, {"id": "2", "name": "Shipping"}],
            "instruction": instruction,
        }
    )


def test_the_chat_prompt_asks_for_json_with_an_example_and_the_categories() -> None:
    categories = [{"category_id": "1", "category_name": "Billing"}]
    messages = qc.build_messages(
        data(instruction="Be strict."), "my bill", categories, "Be strict."
    )
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert "JSON" in messages[0]["content"] and "Be strict." in messages[0]["content"]
    assert json.loads(messages[2]["content"])["category_id"] == "cooking"
    assert messages[3]["content"] == f"Categories: {json.dumps(categories)}\nInput text: my bill"


def test_the_completion_prompt_is_one_message() -> None:
    categories = [{"category_id": "1", "category_name": "Billing"}]
    (message,) = qc.build_messages(data(mode="completion"), "my bill", categories, "")
    assert message["role"] == "user" and message["content"].endswith("Input text: my bill\nAnswer:")


def test_the_answer_schema_allows_only_class_ids() -> None:
    schema = qc.answer_schema([{"category_id": "1", "category_name": "B"}])
    assert schema["properties"]["category_id"]["enum"] == ["1"]
    assert schema["required"] == ["category_id", "category_name"]


@pytest.mark.parametrize(
    ("patch", "key"),
    [
        ({"classes": []}, "too_short"),
        (
            {"classes": [{"id": "1", "name": "a"}, {"id": "1", "name": "b"}]},
            "dsl.classifier.duplicateClass",
        ),
    ],
    ids=["no-classes", "duplicate-ids"],
)
def test_bad_classifier_data_is_refused_by_name(patch: dict, key: str) -> None:
    from pydantic import ValidationError

    raw = data().model_dump() | patch
    with pytest.raises(ValidationError) as caught:
        qc.Data.model_validate(raw)
    assert key in {e["type"] for e in caught.value.errors()}
