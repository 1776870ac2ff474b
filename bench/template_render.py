"""10. Template render cost: what bounding untrusted templates costs per render.

    python -m bench.template_render [--gevent] [--renders 20000]

Baseline: Jinja2's plain `SandboxedEnvironment`, compiled once, `render()`
(what firstgate did before templates were bounded). Ours: `render_jinja`,
whose inline path adds a CPU budget ticked by every loop iteration
and a size check on every piece of output, and whose isolated path renders in
the code sandbox (a template that computes: operators, macros, ...).
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

from firstgate.nodes.templates.jinja import OPTIONS, compile_template, render_jinja  # noqa: E402
from firstgate.sandbox.process_pool import ProcessSandbox, ProcessSandboxConfig  # noqa: E402
from jinja2.sandbox import SandboxedEnvironment  # noqa: E402

from bench.common import header, line, percentile, ratio  # noqa: E402

CASES = {
    "one variable": ("{{ x }}+", {"x": "a"}),
    "loop of 100 items with a filter": (
        "{% for i in items %}{{ i.name|upper }}, {% endfor %}",
        {"items": [{"name": f"n{i}"} for i in range(100)]},
    ),
}
ISOLATED = ("{% macro m(v) %}[{{ v }}]{% endmacro %}{{ m(x) }}", {"x": "a"})


def alternating(functions: list[Callable[[], object]], count: int, rounds: int = 15) -> list[float]:
    """Per function, the median over rounds of one call's CPU time (seconds);
    the functions take turns within every round."""
    results: list[list[float]] = [[] for _ in functions]
    for _ in range(rounds):
        for function, found in zip(functions, results, strict=True):
            started = time.thread_time()
            for _ in range(count):
                function()
            found.append((time.thread_time() - started) / count)
    return [percentile(found, 50) for found in results]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--renders", type=int, default=20000)
    parser.add_argument("--isolated", type=int, default=200)
    parser.add_argument("--gevent", action="store_true")
    args = parser.parse_args()
    header("10. template render cost")
    plain = SandboxedEnvironment(**OPTIONS)
    for name, (source, values) in CASES.items():
        assert compile_template(source).isolate_because is None
        template = plain.from_string(source)
        count = (args.renders if "items" not in values else args.renders // 20) // 15
        base, ours = alternating(
            [
                lambda t=template, v=values: t.render(**v),
                lambda s=source, v=values: render_jinja(s, v),
            ],
            max(count, 1),
        )
        line(
            f"{name:32s} inline {ours * 1e6:7.2f} µs; plain Jinja2 sandbox {base * 1e6:7.2f} µs;"
            f" ratio {ratio(ours, base)} (+{(ours - base) * 1e6:.2f} µs)"
        )
    pool = ProcessSandbox(ProcessSandboxConfig(jinja_options=OPTIONS))
    pool.start()
    try:
        source, values = ISOLATED
        assert compile_template(source).isolate_because == "Macro"
        render_jinja(source, values, executor=pool)  # warm-up
        took = []
        for _ in range(args.isolated):
            started = time.perf_counter()
            render_jinja(source, values, executor=pool)
            took.append(time.perf_counter() - started)
        (base,) = alternating([lambda: plain.from_string(source).render(**values)], 20, rounds=5)
    finally:
        pool.close()
    line(
        f"{'isolated (a macro) in the sandbox':32s} p50 {percentile(took, 50) * 1e3:.2f} ms,"
        f" p99 {percentile(took, 99) * 1e3:.2f} ms; compile+render in-process"
        f" {base * 1e6:.0f} µs; ratio {ratio(percentile(took, 50), base)}"
    )


if __name__ == "__main__":
    main()
