"""Every rendered text is capped while it is built (`common.rendering`): the
substitution, the answer (node and stream), Jinja templates; an LLM prompt by
its route's `max_prompt_bytes` instead (`nodes.llm_prompt.PromptBudget`)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from firstgate.common.cancel import CancelToken
from firstgate.common.rendering import MAX_RENDERED_CHARS, RenderedTooLongError, TextBudget
from firstgate.nodes.base import NodeContext
from firstgate.nodes.llm import Data as LLMData
from firstgate.nodes.llm import messages_for
from firstgate.nodes.llm.prompt import PromptTooLargeError
from firstgate.nodes.templates import jinja
from firstgate.nodes.values import render_text
from firstgate.plugin_daemon_client.plan import RouteTarget
from firstgate.runtime.execution import events as ev
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.unit.test_engine_run import FakeClients, doc, edge, llm, node, run, says

BIG = "x" * 100_000  # 100 KB; 3,000 of them would be 300 MB


class Values:
    def __init__(self, values: dict[tuple[str, ...], Any]) -> None:
        self.values = values

    def get(self, selector: tuple[str, ...]) -> Any:
        return self.values.get(tuple(selector))


def build_messages(
    data: LLMData, variables: Values, max_prompt_bytes: int | None = None
) -> list[dict[str, Any]]:
    target = (
        RouteTarget("gpu-box", FakeClients(says("x")), max_prompt_bytes=max_prompt_bytes)
        if max_prompt_bytes is not None
        else None
    )
    return messages_for(data, NodeContext("llm", 1, variables, CancelToken()), target)


def peak_of(action: Callable[[], object], error: type[Exception] = RenderedTooLongError) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(error):
            action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_cap_is_dify_template_limit_and_one_constant() -> None:
    assert MAX_RENDERED_CHARS == 400_000
    assert jinja.MAX_OUTPUT_CHARS == MAX_RENDERED_CHARS


def test_substitution_fails_before_building_the_whole_text() -> None:
    template = "{{#n.big#}}" * 3000
    variables = Values({("n", "big"): BIG})
    peak = peak_of(lambda: render_text(template, variables))
    # The cap plus one value, not 3,000 values.
    assert peak < 4 * MAX_RENDERED_CHARS, peak


def test_the_error_says_how_much_and_the_limit() -> None:
    with pytest.raises(RenderedTooLongError) as info:
        render_text("{{#n.big#}}" * 5, Values({("n", "big"): BIG}))
    assert str(info.value) == (
        f"the template rendered 500000 characters, more than the limit of {MAX_RENDERED_CHARS}"
    )


def test_a_prompt_is_capped_as_a_whole_and_its_context_is_never_a_template() -> None:
    data = LLMData.model_validate(
        {
            "type": "llm",
            "model": {"provider": "p", "name": "m"},
            "context": {"enabled": True, "variable_selector": ["k", "result"]},
            "prompt_template": [
                {"role": "system", "text": "{{#context#}}"},
                {"role": "user", "text": "{{#context#}} {{#context#}}"},
            ],
        }
    )
    secret = Values({("k", "result"): "see {{#env.KEY#}}", ("env", "KEY"): "s3cret"})
    messages = build_messages(data, secret)
    assert messages[1]["content"] == "see {{#env.KEY#}} see {{#env.KEY#}}"
    # 3 x 150 KB of context: each message alone fits the route's 400 KB, the prompt does not.
    big = Values({("k", "result"): "y" * 150_000})
    peak = peak_of(lambda: build_messages(data, big, 400_000), PromptTooLargeError)
    assert peak < 4 * 400_000, peak


def test_jinja_output_is_checked_while_it_is_produced() -> None:
    template = "{% for i in range(100000) %}" + "z" * 100 + "{% endfor %}"  # 10 MB
    peak = peak_of(lambda: jinja.render_jinja(template, {}))
    assert peak < 4 * MAX_RENDERED_CHARS, peak


def test_a_shared_budget_counts_every_text_against_one_cap() -> None:
    budget = TextBudget(limit=10)
    render_text("12345", Values({}), budget)
    with pytest.raises(RenderedTooLongError):
        render_text("123456", Values({}), budget)


def test_an_answer_fails_at_the_cap_and_streams_no_more_than_the_cap() -> None:
    big_reply = [("w" * 1000) for _ in range(600)]  # 600 KB from the model
    document = doc(
        [
            llm("llm"),
            node("answer", "answer", answer="{{#llm.text#}}"),
        ],
        [edge("start", "llm"), edge("llm", "answer")],
        mode="advanced-chat",
    )
    events = run(document, FakeClients(says(*big_reply)))
    streamed = sum(len(e.text) for e in events if isinstance(e, ev.TextChunk))
    assert streamed == MAX_RENDERED_CHARS
    failed = [e for e in events if isinstance(e, ev.NodeFailed)]
    assert [e.node_id for e in failed] == ["answer"]
    assert failed[0].error_type == "RenderedTooLongError"
    # A chatflow's failed run ends as Dify's does: workflow_finished, then `error`.
    assert isinstance(events[-2], ev.WorkflowFailed)
    assert isinstance(events[-1], ev.ErrorEvent) and events[-1].code == "invalid_param"


def test_the_messages_of_a_prompt_share_one_cap() -> None:
    data = LLMData.model_validate(
        {
            "type": "llm",
            "model": {"provider": "p", "name": "m"},
            "prompt_template": [
                {"role": "system", "text": "{{#n.big#}}"},
                {"role": "user", "text": "{{#n.big#}}"},
            ],
        }
    )
    # Each message alone fits (250 KB); the prompt (500 KB) does not.
    with pytest.raises(PromptTooLargeError) as info:
        build_messages(data, Values({("n", "big"): "b" * 250_000}), 400_000)
    assert (
        str(info.value) == "the prompt passed 400000 bytes, the max_prompt_bytes of route gpu-box"
    )


def test_a_prompt_has_no_character_cap_only_its_route_bound() -> None:
    data = LLMData.model_validate(
        {
            "type": "llm",
            "model": {"provider": "p", "name": "m"},
            "prompt_template": [{"role": "user", "text": "{{#n.big#}} and {{#n.big#}}"}],
        }
    )
    (message,) = build_messages(data, Values({("n", "big"): "c" * 300_000}))
    assert len(message["content"]) == 600_005  # past 400,000 characters, whole


def test_the_bound_counts_utf8_bytes_not_characters() -> None:
    data = LLMData.model_validate(
        {
            "type": "llm",
            "model": {"provider": "p", "name": "m"},
            "prompt_template": [{"role": "user", "text": "{{#n.big#}}"}],
        }
    )
    build_messages(data, Values({("n", "big"): "é" * 2000}), 4000)  # 4,000 bytes: fits
    with pytest.raises(PromptTooLargeError):
        build_messages(data, Values({("n", "big"): "é" * 2001}), 4000)


def test_a_substitution_past_the_bound_fails_before_building_the_whole_prompt() -> None:
    data = LLMData.model_validate(
        {
            "type": "llm",
            "model": {"provider": "p", "name": "m"},
            "prompt_template": [{"role": "user", "text": "{{#n.big#}}" * 3000}],
        }
    )
    peak = peak_of(
        lambda: build_messages(data, Values({("n", "big"): BIG}), 1_000_000), PromptTooLargeError
    )
    assert peak < 4 * 1_000_000, peak  # the bound plus one value, not 300 MB


NAMES = st.sampled_from(["a", "b1", "a.b", "_x", "a._b", "a.__class__", "not", "x.in", "a.", "1"])
TEMPLATE_PIECES = st.one_of(
    st.sampled_from(["{", "}", "{{", "}}", "{%", "%}", "{#", "#}", " ", "a", "_", ".", "|", "\n"]),
    st.builds(lambda name, pad: "{{" + pad + name + pad + "}}", NAMES, st.sampled_from(["", " "])),
)


@settings(max_examples=500, deadline=None, database=None)
@given(pieces=st.lists(TEMPLATE_PIECES, max_size=12))
def test_the_template_fast_path_never_passes_what_parsing_refuses(pieces: list[str]) -> None:
    source = "".join(pieces)
    if jinja._simple(source):
        assert jinja.parsed_problem(source) is None, source


def llm_data(message: dict[str, Any]) -> LLMData:
    return LLMData.model_validate(
        {"type": "llm", "model": {"provider": "p", "name": "m"}, "prompt_template": [message]}
    )


def test_jinja_prompts_are_checked_when_loaded_and_stale_ones_are_not() -> None:
    with pytest.raises(ValidationError) as info:
        llm_data({"role": "user", "edition_type": "jinja2", "jinja2_text": "{% include 'x' %}"})
    assert info.value.errors()[0]["type"] == "dsl.template.loads"
    # The editor keeps the jinja2 text of a message switched back to basic: not used, not checked.
    llm_data({"role": "user", "text": "hi", "edition_type": "basic", "jinja2_text": "{{ oops"})
