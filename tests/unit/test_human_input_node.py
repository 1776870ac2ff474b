"""The human-input node's data as the editor writes it, its load-time checks
(located problems, email without an SMTP server refused naming the setting)
and its form: rendering, defaults, options, answers, timeout outputs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.common.problems import DslError
from firstgate.connectors.smtp_mail import EmailSettings
from firstgate.nodes.human_input import Data, handles, output_names, selectors
from firstgate.nodes.human_input import form as forms
from firstgate.runtime import load_workflow
from firstgate.runtime.settings import RuntimeSettings

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "human_input_workflow.yml"
REVIEW = "1748000000003"
DRAFT = "1748000000002"


def _export() -> dict[str, Any]:
    return yaml.safe_load(CORPUS.read_text())


def _review(export: dict[str, Any]) -> dict[str, Any]:
    return next(n for n in export["workflow"]["graph"]["nodes"] if n["id"] == REVIEW)["data"]


def _problems(export: dict[str, Any], settings: RuntimeSettings | None = None) -> list[Any]:
    with pytest.raises(DslError) as caught:
        load_workflow(export, settings=settings)
    return caught.value.problems


class Pool:
    def __init__(self, values: dict[tuple[str, ...], Any]) -> None:
        self.values = values

    def get(self, selector: tuple[str, ...]) -> Any:
        return self.values.get(tuple(selector))


def _data() -> Data:
    return Data.model_validate(_review(_export()))


def test_the_editors_node_reads_as_a_branch_on_its_actions_and_the_timeout() -> None:
    data = _data()
    assert handles(data) == {"approve", "apply_edit", "reject", "__timeout"}
    assert output_names(data) == {
        "edits", "priority", "attachment", "references",
        "__action_id", "__action_value", "__rendered_content",
    }  # fmt: skip
    assert (DRAFT, "output") in selectors(data)
    assert data.webapp and data.timeout_s == 3 * 86400


def test_email_delivery_without_an_smtp_server_is_refused_naming_the_setting() -> None:
    export = _export()
    _review(export)["delivery_methods"][1]["enabled"] = True
    _review(export)["delivery_methods"][1]["config"]["recipients"]["items"] = [
        {"type": "external", "email": "reviewer@example.com"}
    ]
    (problem,) = _problems(export)
    assert problem.message_key == "dsl.humanInput.emailNeedsSmtp"
    assert problem.node is not None and problem.node.id == REVIEW
    assert "email.smtp_host" in str(problem)
    with_smtp = RuntimeSettings(email=EmailSettings(smtp_host="127.0.0.1", smtp_port=2525))
    assert load_workflow(copy.deepcopy(export), settings=with_smtp) is not None


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (lambda d: d["user_actions"].append({"id": "approve", "title": "Again"}), "dsl.humanInput.duplicate"),
        (lambda d: d["user_actions"].append({"id": "__timeout", "title": "T"}), "dsl.humanInput.reservedAction"),
        (lambda d: d["inputs"][1].pop("option_source"), "dsl.humanInput.noOptions"),
        (lambda d: d["delivery_methods"].append({"type": "slack", "enabled": True}), "dsl.humanInput.unsupportedDelivery"),
        (lambda d: d.update(timeout_unit="week"), "dsl.choice"),
        (lambda d: d.update(user_actions=[]), None),
        (lambda d: d["user_actions"][0].update(id="not an id"), None),
    ],
)  # fmt: skip
def test_a_node_the_runtime_cannot_run_is_a_located_problem(change: Any, key: str | None) -> None:
    export = _export()
    change(_review(export))
    problems = _problems(export)
    assert problems and all(p.node is not None and p.node.id == REVIEW for p in problems)
    if key is not None:
        assert key in {p.message_key for p in problems}


def test_an_email_method_with_no_address_is_refused() -> None:
    export = _export()
    _review(export)["delivery_methods"][1]["enabled"] = True
    settings = RuntimeSettings(email=EmailSettings(smtp_host="127.0.0.1"))
    (problem,) = _problems(export, settings)
    assert problem.message_key == "dsl.humanInput.noRecipients"


def _opened() -> dict[str, Any]:
    pool = Pool({(DRAFT, "output"): "A short note about tea."})
    return forms.open_form(_data(), pool, node_id=REVIEW, now=1_000_000.0).definition


def test_the_opened_form_has_the_run_s_values_and_keeps_the_input_places() -> None:
    definition = _opened()
    assert "A short note about tea." in definition["form_content"]
    assert "{{#$output.edits#}}" in definition["form_content"]
    assert definition["resolved_default_values"] == {"edits": "A short note about tea."}
    assert definition["expiration_time"] == 1_000_000 + 3 * 86400
    select = definition["inputs"][1]
    assert select["option_source"]["value"] == ["low", "medium", "high"]
    assert definition["inputs"][3]["number_limits"] == 3
    assert len(definition["form_token"]) >= 40
    assert definition["form_token"] != _opened()["form_token"]
    required = forms.required_data(definition)
    assert required["form_token"] == definition["form_token"]
    assert [a["id"] for a in required["actions"]] == ["approve", "apply_edit", "reject"]


def _file(value: Any, item: Any) -> dict[str, Any]:
    # As serve's resolver: a file object, else the input's refusal.
    if not isinstance(value, dict):
        raise forms.FormInvalid("errors.humanInput.notFiles", name=item["output_variable_name"])
    return {"name": value["url"], "input": item["output_variable_name"]}


def test_an_answer_is_checked_as_dify_checks_it() -> None:
    definition = _opened()
    good = {
        "priority": "high",
        "attachment": {"transfer_method": "remote_url", "url": "https://x/a.png"},
        "references": [{"transfer_method": "remote_url", "url": "https://x/b.pdf"}],
    }
    values = forms.check_submission(definition, "apply_edit", good, _file)
    assert values["edits"] == "A short note about tea."  # the default when not given
    outputs, handle = forms.answer_outputs(definition, "apply_edit", values)
    assert handle == "apply_edit"
    assert outputs["__action_value"] == "Use my edits" and outputs["priority"] == "high"
    assert "Priority: high" in outputs["__rendered_content"]
    refusals = [
        ("nope", good, "errors.humanInput.invalidAction"),
        ("approve", {**good, "priority": "urgent"}, "errors.humanInput.notAnOption"),
        ("approve", {"priority": "low"}, "errors.humanInput.missingInputs"),
        ("approve", {**good, "edits": 5}, "errors.humanInput.notText"),
        ("approve", {**good, "references": [good["attachment"]] * 4}, "errors.humanInput.tooManyFiles"),
        ("approve", {**good, "attachment": "a.png"}, "errors.humanInput.notFiles"),
        ("approve", {**good, "edits": "x" * (forms.MAX_PARAGRAPH_CHARS + 1)}, "errors.humanInput.tooLong"),
    ]  # fmt: skip
    for action, inputs, key in refusals:
        with pytest.raises(forms.FormInvalid) as caught:
            forms.check_submission(definition, action, inputs, _file)
        assert caught.value.message_key == key
    missing = pytest.raises(forms.FormInvalid)
    with missing as caught:
        forms.check_submission(definition, "approve", {"priority": "low"}, _file)
    assert "attachment, references" in str(caught.value)


def test_nobody_answering_takes_the_timeout_branch_with_the_defaults() -> None:
    outputs, handle = forms.timeout_outputs(_opened())
    assert handle == "__timeout"
    assert outputs["edits"] == "A short note about tea."
    assert outputs["priority"] == "" and outputs["attachment"] is None
    assert outputs["references"] == [] and outputs["__action_id"] == "__timeout"


def test_a_form_token_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # `firstgate resume TOKEN` would read "-..." as an option (1 token in 64).
    drawn = iter(["-starts-with-a-dash", "plain_token"])
    monkeypatch.setattr(forms.secrets, "token_urlsafe", lambda _n: next(drawn))
    assert forms.new_token() == "plain_token"
