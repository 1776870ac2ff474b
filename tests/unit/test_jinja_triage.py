"""Which templates render in-process, and the in-process guards (nodes/templates/jinja.py)."""

from __future__ import annotations

import threading

import pytest
from firstgate.nodes.base import NodeRunError
from firstgate.nodes.templates import jinja
from firstgate.nodes.templates.jinja import compile_template, render_jinja

INLINE = [
    "Hello {{ name }}!",
    "{% for item in items %}{{ loop.index }}. {{ item.title|upper }}\n{% endfor %}",
    "{% for item in items if item.active %}{{ item.name }}{% else %}none{% endfor %}",
    "{% for k, v in data.items() %}{{ k }}={{ v|tojson }};{% endfor %}",
    "{{ items|map(attribute='name')|join(', ') }}",
    "{{ text|replace('\\n', '<br>')|truncate(100) }}",
    "{% if score > 0.5 and tags|length %}{{ tags|sort|first }}{% endif %}",
    "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
    "{{ a ~ ' - ' ~ b }}",
    "{{ ', '.join(items) }}",
    "{% for i in range(3) %}{{ loop.cycle('odd', 'even') }}{% endfor %}",
]
ISOLATED = {
    "{{ 'x' * 1000000000 }}": "Mul",
    "{{ 10 ** 10 ** 10 }}": "Pow",
    "{{ '%999999999s' % x }}": "Mod",
    "{{ x|center(999999999) }}": "filter center",
    "{{ x|indent(width=999999999) }}": "filter indent",
    "{{ '{:>999999999}'.format(x) }}": "method format",
    "{{ x.ljust(999999999) }}": "method ljust",
    "{{ items|join(sep) }}": "filter join with computed arguments",
    "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}": "an assignment reads an assigned variable",
    "{% set a = [x, x] %}{% set b = [a, a] %}{{ b }}": "an assignment reads an assigned variable",
    "{% macro m(x) %}{{ x }}{{ x }}{% endmacro %}{{ m(y) }}": "Macro",
    "{% for x in tree recursive %}{{ loop(x.children) }}{% endfor %}": "recursive loop",
    "{{ " + " ~ ".join(["x"] * 9) + " }}": "9 variable reads in one expression",
    "{{ lipsum(999999) }}": "call of lipsum",
    "{{ items|map('center', 999999)|list }}": "map applies center",
}


@pytest.mark.parametrize("source", INLINE)
def test_reading_templates_render_inline(source: str) -> None:
    assert compile_template(source).isolate_because is None


@pytest.mark.parametrize(("source", "why"), sorted(ISOLATED.items()))
def test_computing_templates_are_isolated(source: str, why: str) -> None:
    assert compile_template(source).isolate_because == why


def test_inline_renders_as_jinja_does() -> None:
    items = [{"title": "a", "active": True}, {"title": "b", "active": False}]
    assert render_jinja(INLINE[1], {"items": items}) == "1. A\n2. B\n"
    assert render_jinja(INLINE[7], {"xs": [1, 2, 3]}) == "3"


def test_an_isolated_template_without_a_sandbox_is_refused_not_rendered_here() -> None:
    with pytest.raises(NodeRunError) as caught:
        render_jinja("{{ 'x' * 1000000000 }}", {})
    assert caught.value.message_key == "errors.template.noSandbox"


def test_output_is_capped_while_it_is_produced(monkeypatch: pytest.MonkeyPatch) -> None:
    produced: list[int] = []
    real = jinja.Template.generate

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        for piece in real(self, *args, **kwargs):
            produced.append(len(piece))
            yield piece

    monkeypatch.setattr(jinja.Template, "generate", counting)
    big = "y" * 1000
    with pytest.raises(Exception) as caught:
        render_jinja("{% for i in range(100000) %}{{ big }}{% endfor %}", {"big": big})
    assert caught.value.message_key == "dsl.node.templateTooLong"
    # Stopped right after the cap, not after building all 100 MB.
    assert sum(produced) <= jinja.MAX_OUTPUT_CHARS + len(big)


@pytest.mark.parametrize(
    "source",
    [
        # 10^10 iterations without output or a single call: only the loop ticks stop it.
        "{% for a in items %}{% for b in items %}{% endfor %}{% endfor %}",
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
    ],
)
def test_an_endless_inline_loop_is_stopped_by_its_cpu_budget(source: str) -> None:
    assert compile_template(source).isolate_because is None
    # Out of inline budget, it would move to the sandbox; there is none here.
    error = stopped_render(source, {"items": list(range(100000))})
    assert isinstance(error, NodeRunError)
    assert error.message_key == "errors.template.noSandbox"


def test_filtered_loops_tick_on_every_item_they_skip() -> None:
    source = "{% for a in text %}{% for b in text if b == '!' %}{{ b }}{% endfor %}{% endfor %}"
    error = stopped_render(source, {"text": "x" * 200_000})
    assert getattr(error, "message_key", "") == "errors.template.noSandbox"


def stopped_render(source: str, values: dict[str, object]) -> BaseException | None:
    """Render in a thread; fail (not hang) when the render is not stopped in time."""
    outcome: list[BaseException] = []

    def render() -> None:
        try:
            render_jinja(source, values)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    worker = threading.Thread(target=render, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the render was not stopped"
    return outcome[0] if outcome else None


def test_a_syntax_error_is_a_template_error() -> None:
    with pytest.raises(NodeRunError) as caught:
        render_jinja("{{ unclosed", {})
    assert caught.value.message_key == "dsl.node.templateError"


def test_compiling_never_evaluates_the_template() -> None:
    # Jinja's optimizer would fold constants at compile time: a gigabyte here.
    import tracemalloc

    tracemalloc.start()
    try:
        compiled = compile_template("{{ 'x' * 1000000000 }}{{ 9 ** 9 ** 9 }}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert compiled.template is None
    assert peak < 10 * 1024 * 1024


def test_the_inline_environment_itself_never_folds_constants() -> None:
    # Even a template the triage would have isolated compiles without evaluating.
    import tracemalloc

    tracemalloc.start()
    try:
        jinja._ENV.compile("{{ 'x' * 1000000000 }}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 1024 * 1024
