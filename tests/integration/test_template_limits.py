"""Untrusted templates against the real sandbox: a template that loops for ever
or builds a gigabyte is stopped with a typed error and the run goes on."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from firstgate.nodes.templates.jinja import compile_template, render_jinja
from firstgate.runtime import RunResources, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.sandbox.errors import CodeResourceLimitError, CodeTimeoutError
from firstgate.sandbox.process_pool import ProcessSandbox

from tests.integration.sandbox_support import CPU_BOUND, small_sandbox


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessSandbox]:
    with small_sandbox() as started:
        yield started


ENDLESS = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
GIGABYTE = "{{ 'x' * 1000000000 }}"


def test_endless_template_moves_to_the_sandbox_and_hits_its_cpu_limit() -> None:
    with small_sandbox(workers=1, limits=CPU_BOUND) as pool:
        with pytest.raises(CodeTimeoutError) as caught:
            render_jinja(ENDLESS, {}, executor=pool)
    assert caught.value.message_key == "errors.template.cpuLimit"


def test_gigabyte_string_hits_the_sandbox_memory_limit(pool: ProcessSandbox) -> None:
    with pytest.raises(CodeResourceLimitError) as caught:
        render_jinja(GIGABYTE, {}, executor=pool)
    assert caught.value.message_key == "errors.template.memoryLimit"


def test_doubling_in_a_loop_is_stopped_in_the_sandbox(pool: ProcessSandbox) -> None:
    source = "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}"
    with pytest.raises(CodeResourceLimitError):
        render_jinja(source, {}, executor=pool)


def test_isolated_templates_render_like_inline_ones(pool: ProcessSandbox) -> None:
    source = "{% macro row(i) %}<{{ i.name }}:{{ '%03d' % i.n }}>{% endmacro %}{% for i in items %}{{ row(i) }}{% endfor %}\n"
    assert compile_template(source).isolate_because == "Macro"
    items = [{"name": "a", "n": 1}, {"name": "b", "n": 22}]
    assert render_jinja(source, {"items": items}, executor=pool) == "<a:001><b:022>\n"


def test_a_heavy_but_finite_template_finishes_in_the_sandbox() -> None:
    # Inline it would take more than its CPU budget; in the sandbox it finishes.
    # It needs most of a CPU second there, so its limits leave room for a slow
    # CPU (this test is about moving, not about the CPU limit).
    source = "{% set ns = namespace(n=0) %}{% for a in range(1000) %}{% for b in range(150) %}{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ ns.n }}"
    assert compile_template(source).isolate_because is None
    jobs: list[str] = []

    def recording(language: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        jobs.append(language)
        return real(language, *args, **kwargs)  # type: ignore[arg-type]

    with small_sandbox(workers=1, limits=replace(CPU_BOUND, cpu_s=10.0)) as pool:
        real = pool.execute
        pool.execute = recording  # type: ignore[method-assign]
        assert render_jinja(source, {}, executor=pool) == "150000"
    assert jobs == ["jinja2"]  # it ran out of its inline budget and moved


def test_errors_in_isolated_templates_read_like_template_errors(pool: ProcessSandbox) -> None:
    from firstgate.nodes.base import NodeRunError

    with pytest.raises(NodeRunError) as caught:
        render_jinja("{{ ''.__class__ * 2 }}", {}, executor=pool)
    assert caught.value.message_key == "dsl.node.templateError"


def flow(template: str) -> dict[str, Any]:
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "t", "mode": "workflow"},
        "workflow": {
            "graph": {
                "nodes": [
                    {"id": "s", "data": {"type": "start", "title": "s"}},
                    {
                        "id": "bad",
                        "data": {
                            "type": "template-transform",
                            "title": "bad",
                            "template": template,
                            "error_strategy": "fail-branch",
                        },
                    },
                    {
                        "id": "next",
                        "data": {
                            "type": "code",
                            "title": "next",
                            "code_language": "python3",
                            "code": "def main(why: str) -> dict:\n    return {'r': why}\n",
                            "variables": [
                                {"variable": "why", "value_selector": ["bad", "error_type"]}
                            ],
                            "outputs": {"r": {"type": "string"}},
                        },
                    },
                    {
                        "id": "e",
                        "data": {
                            "type": "end",
                            "title": "e",
                            "outputs": [{"variable": "r", "value_selector": ["next", "r"]}],
                        },
                    },
                ],
                "edges": [
                    {"source": "s", "target": "bad"},
                    {"source": "bad", "target": "next", "sourceHandle": "fail-branch"},
                    {"source": "next", "target": "e"},
                ],
            }
        },
    }


@pytest.mark.parametrize(
    ("template", "error_type"),
    [(ENDLESS, "CodeTimeoutError"), (GIGABYTE, "CodeResourceLimitError")],
)
def test_hostile_template_in_a_workflow_takes_the_fail_branch(
    pool: ProcessSandbox, template: str, error_type: str
) -> None:
    with RunResources.open(code_executor=pool) as resources:
        events = list(load_workflow(flow(template)).run({}, resources=resources))
    assert isinstance(events[-1], ev.WorkflowPartialSucceeded)
    assert events[-1].outputs == {"r": error_type}


def test_an_llm_jinja2_prompt_that_computes_renders_in_the_sandbox(pool: ProcessSandbox) -> None:
    from firstgate.nodes import llm

    class Values:
        def get(self, selector: tuple[str, ...]) -> Any:
            return {("s", "n"): 3}.get(tuple(selector))

    data = llm.Data.model_validate(
        {
            "type": "llm",
            "model": {"provider": "p", "name": "m", "mode": "chat"},
            "prompt_config": {
                "jinja2_variables": [{"variable": "n", "value_selector": ["s", "n"]}]
            },
            "prompt_template": [
                {
                    "role": "user",
                    "edition_type": "jinja2",
                    "text": "",
                    "jinja2_text": "{{ '-' * n }}|",
                }
            ],
        }
    )
    from firstgate.common.cancel import CancelToken
    from firstgate.nodes.base import NodeContext

    def context(executor: ProcessSandbox | None) -> NodeContext:
        return NodeContext(
            node_id="l", attempt=1, variables=Values(), cancel=CancelToken(), code_executor=executor
        )

    assert compile_template("{{ '-' * n }}|").isolate_because == "Mul"
    (message,) = llm.messages_for(data, context(pool))
    assert (message["role"], message["content"]) == ("user", "---|")
    with pytest.raises(Exception) as caught:
        llm.messages_for(data, context(None))  # no sandbox: refused, not rendered here
    assert getattr(caught.value, "message_key", "") == "errors.template.noSandbox"
