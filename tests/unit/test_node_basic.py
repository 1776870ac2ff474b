"""Start, end, answer, template-transform, variable-aggregator and the LLM prompt."""

from __future__ import annotations

from typing import Any

import pytest
from firstgate.common.cancel import CancelToken
from firstgate.nodes import answer, end, llm, start, template_transform, variable_aggregator
from firstgate.nodes.base import NodeContext, NodeRunError
from firstgate.nodes.selectors import parse_template, template_selectors
from pydantic import ValidationError


class Vars:
    def __init__(self, values: dict[tuple[str, ...], Any]) -> None:
        self.values = values

    def get(self, selector: tuple[str, ...]) -> Any:
        value: Any = self.values.get(tuple(selector[:2]))
        for part in selector[2:]:
            value = value.get(part) if isinstance(value, dict) else None
        return value


def ctx(values: dict[tuple[str, ...], Any] | None = None, **kw: Any) -> NodeContext:
    return NodeContext(
        node_id="n", attempt=1, variables=Vars(values or {}), cancel=CancelToken(), **kw
    )


START = start.Data.model_validate(
    {
        "type": "start",
        "variables": [
            {"variable": "name", "type": "text-input", "required": True, "max_length": 5},
            {"variable": "n", "type": "number", "default": 2},
            {"variable": "flag", "type": "checkbox"},
            {"variable": "pick", "type": "select", "options": ["a", "b"]},
        ],
    }
)


def test_start_inputs_are_coerced_with_defaults() -> None:
    values = start.validate_inputs(START, {"name": "ann", "flag": "true", "pick": "b"})
    assert values == {"name": "ann", "n": 2, "flag": True, "pick": "b"}
    assert start.validate_inputs(START, {"name": "x", "n": "3.5"})["n"] == 3.5
    result = start.run(START, ctx(inputs=values))
    assert result.outputs == values


@pytest.mark.parametrize(
    ("inputs", "key"),
    [
        ({}, "dsl.input.missing"),
        ({"name": "toolong"}, "dsl.input.tooLong"),
        ({"name": "a", "n": "x"}, "dsl.input.type"),
        ({"name": "a", "flag": "maybe"}, "dsl.input.type"),
        ({"name": "a", "pick": "c"}, "dsl.input.type"),
        ({"name": "a", "other": 1}, "dsl.input.unknown"),
    ],
)
def test_start_rejects_bad_inputs(inputs: dict[str, Any], key: str) -> None:
    with pytest.raises(start.InputError) as info:
        start.validate_inputs(START, inputs)
    assert info.value.message_key == key


@pytest.mark.parametrize("value", [5, 2.5, float("nan"), float("inf"), True, {"a": 1}, ["a"]])
@pytest.mark.parametrize("kind", ["text-input", "paragraph", "select"])
def test_a_text_input_takes_only_a_string(kind: str, value: Any) -> None:
    data = start.Data.model_validate(
        {"type": "start", "variables": [{"variable": "t", "type": kind, "options": []}]}
    )
    with pytest.raises(start.InputError) as info:
        start.validate_inputs(data, {"t": value})
    assert info.value.message_key == "dsl.input.notString"
    assert "must be a string" in str(info.value)


def test_a_text_input_default_from_the_export_stays_text() -> None:
    data = start.Data.model_validate(
        {"type": "start", "variables": [{"variable": "t", "type": "text-input", "default": 5}]}
    )
    assert start.validate_inputs(data, {}) == {"t": "5"}


def test_end_reads_selectors() -> None:
    data = end.Data.model_validate(
        {"type": "end", "outputs": [{"variable": "o", "value_selector": ["a", "b", "c"]}]}
    )
    assert end.run(data, ctx({("a", "b"): {"c": 5}})).outputs == {"o": 5}


def test_answer_renders_variables_as_dify_markdown_and_missing_as_empty() -> None:
    data = answer.Data.model_validate(
        {"type": "answer", "answer": "{{#a.x#}}-{{#a.obj#}}-{{#a.list#}}-{{#a.none#}}!"}
    )
    values = {("a", "x"): 1, ("a", "obj"): {"k": "ü"}, ("a", "list"): ["p", "q"]}
    result = answer.run(data, ctx(values))
    assert result.outputs == {"answer": '1-{\n  "k": "ü"\n}-- p\n- q-!'}


def test_selector_parsing() -> None:
    assert template_selectors("x {{#1732.text#}} {{#sys.query#}} {{#context#}}") == [
        ("1732", "text"),
        ("sys", "query"),
    ]
    assert len(parse_template("a{{#n.v#}}b")) == 3


def test_template_transform_renders_in_a_sandbox() -> None:
    data = template_transform.Data.model_validate(
        {
            "type": "template-transform",
            "template": "{{ name | upper }}: {{ items | join(',') }}",
            "variables": [
                {"variable": "name", "value_selector": ["s", "n"]},
                {"variable": "items", "value_selector": ["s", "i"]},
            ],
        }
    )
    assert template_transform.run(data, ctx({("s", "n"): "bo", ("s", "i"): [1, 2]})).outputs == {
        "output": "BO: 1,2"
    }
    escape = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(ValidationError) as refused:  # validation sees it (issue 12)
        template_transform.Data.model_validate({"type": "template-transform", "template": escape})
    assert refused.value.errors()[0]["type"] == "dsl.template.unsafe"
    # ...and the sandbox still refuses it at run time, should validation be bypassed.
    unsafe = template_transform.Data.model_construct(type="template-transform", template=escape)
    with pytest.raises(NodeRunError) as info:
        template_transform.run(unsafe, ctx())
    assert info.value.message_key == "dsl.node.templateError"


def test_variable_aggregator_takes_the_first_set_value() -> None:
    data = variable_aggregator.Data.model_validate(
        {"type": "variable-aggregator", "variables": [["a", "x"], ["b", "x"]]}
    )
    assert variable_aggregator.run(data, ctx({("b", "x"): "B"})).outputs == {"output": "B"}
    assert variable_aggregator.run(data, ctx({("a", "x"): "A", ("b", "x"): "B"})).outputs == {
        "output": "A"
    }
    grouped = variable_aggregator.Data.model_validate(
        {
            "type": "variable-aggregator",
            "advanced_settings": {
                "group_enabled": True,
                "groups": [{"group_name": "g1", "variables": [["a", "x"]]}],
            },
        }
    )
    assert variable_aggregator.output_names(grouped) == {"g1"}
    assert variable_aggregator.run(grouped, ctx({("a", "x"): 1})).outputs == {"g1": {"output": 1}}


def test_variable_aggregator_leaves_out_what_has_no_value_as_dify_does() -> None:
    # Dify's outputs hold only what was found; its inputs name each value found
    # by its selector without the node id.
    grouped = variable_aggregator.Data.model_validate(
        {
            "type": "variable-aggregator",
            "advanced_settings": {
                "group_enabled": True,
                "groups": [
                    {"group_name": "g1", "variables": [["a", "x"], ["b", "x"]]},
                    {"group_name": "g2", "variables": [["c", "y"]]},
                ],
            },
        }
    )
    result = variable_aggregator.run(grouped, ctx({("b", "x"): "B"}))
    assert result.outputs == {"g1": {"output": "B"}}
    assert result.inputs == {"x": "B"}
    plain = variable_aggregator.Data.model_validate(
        {"type": "variable-aggregator", "variables": [["a", "x"]]}
    )
    assert variable_aggregator.run(plain, ctx({})).outputs == {}


def test_llm_prompt_with_context_and_jinja2() -> None:
    data = llm.Data.model_validate(
        {
            "type": "llm",
            "model": {"provider": "p", "name": "m", "mode": "chat"},
            "context": {"enabled": True, "variable_selector": ["kb", "result"]},
            "prompt_config": {
                "jinja2_variables": [{"variable": "who", "value_selector": ["s", "who"]}]
            },
            "prompt_template": [
                {"role": "system", "text": "Use: {{#context#}}"},
                {
                    "role": "user",
                    "edition_type": "jinja2",
                    "text": "",
                    "jinja2_text": "Hi {{ who }}",
                },
                {"role": "assistant", "text": "{{#s.who#}}?"},
            ],
        }
    )
    values = {("kb", "result"): [{"content": "a"}, {"content": "b"}], ("s", "who"): "Bo"}
    assert llm.messages_for(data, NodeContext("n", 1, Vars(values), CancelToken())) == [
        {"role": "system", "content": "Use: a\nb"},
        {"role": "user", "content": "Hi Bo"},
        {"role": "assistant", "content": "Bo?"},
    ]
    assert set(llm.selectors(data)) == {("s", "who"), ("kb", "result")}
