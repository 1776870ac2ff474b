"""User templates (template-transform, LLM jinja2 prompts): untrusted, so bounded.

Two ways to render, chosen per template when it is compiled (once):

- **inline**, in this process, for templates that only read, filter and
  arrange their inputs (`nodes/templates/triage.py` says which). Every loop
  checks a budget of `INLINE_CPU_S` of this thread's CPU time once per
  `_CHECK_EVERY` iterations, and the output is checked against the rendering
  cap piece by piece while it is produced, so neither an endless loop nor a
  huge output can take the process down. A render that runs out of budget is dropped and
  done again in the sandbox, with the sandbox's limits.
- **isolated**, in the code sandbox (`ctx.code_executor`, language
  `jinja2`), for everything else: the job's process has hard CPU-time and
  memory limits and a wall-clock timeout.

Both use a Jinja2 `SandboxedEnvironment` with the same options.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain, islice
from typing import TYPE_CHECKING, Annotated, Any

from firstgate.common.dsl import dsl_error, shown
from firstgate.common.rendering import MAX_RENDERED_CHARS, TextBuilder, too_long
from firstgate.nodes.base import NeedsWorker, NodeRunError
from firstgate.nodes.templates.triage import inline_reason
from firstgate.nodes.values import jsonable
from firstgate.sandbox.errors import CodeExecutionError
from jinja2 import Template, TemplateError, TemplateSyntaxError, nodes
from jinja2.sandbox import SandboxedEnvironment
from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

if TYPE_CHECKING:
    from firstgate.common.cancel import Cancellable
    from firstgate.sandbox.executor import CodeExecutor

# Dify caps template output; an unbounded template can exhaust memory. The cap
# and its check are the ones every rendered text has (common/rendering.py).
MAX_OUTPUT_CHARS = MAX_RENDERED_CHARS
# CPU time an inline render may take before it moves to the sandbox.
INLINE_CPU_S = 0.05
# On the engine's dispatcher a render may take far less (every event of the
# run waits for it); past this it moves to a worker (`NeedsWorker`).
DISPATCHER_CPU_S = 0.002
_CHECK_EVERY = 256
OPTIONS: dict[str, Any] = {"autoescape": False, "keep_trailing_newline": True}


class _OverBudget(Exception):
    pass


class _Budget:
    """This thread's CPU time from the render's first loop on: a render without
    loops never reads the clock (the common case stays cheap)."""

    __slots__ = ("seconds", "deadline")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline: float | None = None

    def check(self) -> None:
        now = time.thread_time()
        if self.deadline is None:
            self.deadline = now + self.seconds
        elif now > self.deadline:
            raise _OverBudget()


_current = threading.local()  # a greenlet-local under gevent


class _BudgetedEnvironment(SandboxedEnvironment):
    """Every loop iterates through `ticking`, which checks the current render's
    budget. (Work outside loops is bounded by the template's length; macros,
    the way to recurse, are isolated by the triage.)"""

    # Jinja evaluates constant expressions while it compiles (`as_const`, with or
    # without its optimizer), so `{{ 'x' * 10**9 }}` would build its gigabyte
    # here, before any guard ran. Intercepted operators are never folded.
    intercepted_binops = frozenset({"*", "**", "%"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(nodes.For):
            ticking = nodes.EnvironmentAttribute("ticking", lineno=loop.lineno)
            loop.iter = nodes.Call(ticking, [loop.iter], [], None, None, lineno=loop.lineno)
        return tree

    @staticmethod
    def ticking(iterable: Iterable[Any]) -> Iterable[Any]:
        budget = getattr(_current, "budget", None)
        if budget is None:
            return iterable
        source = iter(iterable)

        def chunks() -> Iterator[list[Any]]:
            # The budget is checked once per chunk of iterations; the items
            # themselves flow through C (islice, chain), not a Python frame each.
            while chunk := list(islice(source, _CHECK_EVERY)):
                budget.check()
                yield chunk

        return chain.from_iterable(chunks())


_ENV = _BudgetedEnvironment(**OPTIONS)


@dataclass(frozen=True, slots=True)
class Compiled:
    # Compiled only for inline rendering; an isolated template is parsed here
    # (its syntax errors are found) and compiled in the sandbox.
    template: Template | None
    # Why it must render in the sandbox; None: it may render inline.
    isolate_because: str | None


class _TemplateCache:
    """Compiled templates, least recently used out first. Compiling costs far
    more than rendering and a workflow renders the same templates on every run,
    so the cache is sized by the workflows: `BASE` entries plus what each loaded
    workflow reserved (its distinct templates, counted when it was loaded, given
    back when it is gone), never a constant that a large workflow, or several
    taking turns, would thrash. Compiled templates are safe to share across threads."""

    BASE = 512

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Compiled] = OrderedDict()
        self._reserved = 0

    @property
    def capacity(self) -> int:
        return self.BASE + self._reserved

    def get(self, source: str) -> Compiled:
        with self._lock:
            found = self._entries.get(source)
            if found is not None:
                self._entries.move_to_end(source)
                return found
        compiled = _compile(source)  # outside the lock: another thread may compile it too
        with self._lock:
            self._entries[source] = compiled
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return compiled

    def reserve(self, count: int) -> _Reservation:
        with self._lock:
            self._reserved += count
        return _Reservation(self, count)

    def _release(self, count: int) -> None:
        with self._lock:
            self._reserved -= count

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


class _Reservation:
    def __init__(self, cache: _TemplateCache, count: int) -> None:
        self._cache: _TemplateCache | None = cache
        self._count = count

    def release(self) -> None:
        if self._cache is not None:
            self._cache._release(self._count)
            self._cache = None


_COMPILED = _TemplateCache()


def compile_template(source: str) -> Compiled:
    return _COMPILED.get(source)


def reserve_templates(count: int) -> _Reservation:
    """Room in the compiled-template cache for a loaded workflow's `count`
    templates; `release()` it when the workflow is gone."""
    return _COMPILED.reserve(count)


def _compile(source: str) -> Compiled:
    try:
        reason = inline_reason(_ENV.parse(source))
        return Compiled(_ENV.from_string(source) if reason is None else None, reason)
    except TemplateError as exc:
        raise NodeRunError("dsl.node.templateError", detail=str(exc)) from exc


# While a workflow loads, the templates its nodes check (one set per load).
_counting: ContextVar[set[str] | None] = ContextVar("firstgate_templates", default=None)


@contextmanager
def counting_templates() -> Iterator[set[str]]:
    """Collect the distinct templates validated inside the block."""
    found: set[str] = set()
    token = _counting.set(found)
    try:
        yield found
    finally:
        _counting.reset(token)


# Constructs that load other templates: user templates have no loader (and may not
# have one), so these can only fail; say so when the workflow is validated.
_LOADERS = {
    nodes.Include: "{% include %}",
    nodes.Import: "{% import %}",
    nodes.FromImport: "{% from ... import %}",
    nodes.Extends: "{% extends %}",
}


# Text with only `{{ name }}` / `{{ name.field }}` substitutions (the common
# template) cannot have any of the problems below: no need to parse it.
_PLAIN_TEXT = r"(?:[^{]|\{(?![{%#]))*"
_SIMPLE = re.compile(
    rf"{_PLAIN_TEXT}(?:\{{\{{ *[A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z][A-Za-z0-9_]*)* *\}}\}}{_PLAIN_TEXT})*"
)
_OPERATORS = frozenset({"and", "or", "not", "in", "is", "if", "else"})
_NAMES = re.compile(r"\{\{ *([A-Za-z0-9_.]+) *\}\}")


def _simple(source: str) -> bool:
    if not _SIMPLE.fullmatch(source):
        return False
    names = (part for name in _NAMES.findall(source) for part in name.split("."))
    return not any(name in _OPERATORS for name in names)


@lru_cache(maxsize=2048)
def template_problem(source: str) -> PydanticCustomError | None:
    """What is wrong with a template that validation can see: its syntax, a
    construct that loads other templates, an attribute the sandbox refuses."""
    return None if _simple(source) else parsed_problem(source)


def parsed_problem(source: str) -> PydanticCustomError | None:
    """`template_problem` by parsing, whatever the template."""
    try:
        tree = _ENV.parse(source)
    except TemplateSyntaxError as exc:
        return dsl_error(
            "dsl.template.syntax",
            "is not a valid Jinja2 template: {detail} (line {line})",
            detail=exc.message or "?",
            line=exc.lineno,
        )
    for node in tree.find_all(tuple(_LOADERS)):
        return dsl_error(
            "dsl.template.loads",
            "uses {construct}, but a template cannot load other templates (line {line})",
            construct=_LOADERS[type(node)],
            line=node.lineno,
        )
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        name = node.attr if isinstance(node, nodes.Getattr) else _constant(node.arg)
        if isinstance(name, str) and name.startswith("_"):
            return dsl_error(
                "dsl.template.unsafe",
                "reads {name}, which templates may not read (line {line})",
                name=shown(name),
                line=node.lineno,
            )
    return None


def _constant(node: nodes.Node) -> object:
    return node.value if isinstance(node, nodes.Const) else None


def checked_template(source: str) -> str:
    """A pydantic validator: the template, or its problem (located by the field)."""
    counted = _counting.get()
    if counted is not None:
        counted.add(source)
    problem = template_problem(source)
    if problem is not None:
        raise problem
    return source


JinjaSource = Annotated[str, AfterValidator(checked_template)]


def render_jinja(
    template: str,
    variables: Mapping[str, Any],
    *,
    executor: CodeExecutor | None = None,
    cancel: Cancellable | None = None,
    on_dispatcher: bool = False,
) -> str:
    """Render inline or in the sandbox (see the module's docstring). `on_dispatcher`:
    the caller may not wait; anything but a quick inline render raises `NeedsWorker`."""
    compiled = compile_template(template)
    if compiled.template is not None:
        try:
            budget = DISPATCHER_CPU_S if on_dispatcher else INLINE_CPU_S
            return _render_inline(compiled.template, variables, budget)
        except _OverBudget:
            pass  # too much work for this process: the sandbox does it, with its limits
    if on_dispatcher:
        raise NeedsWorker()
    return _render_isolated(template, variables, executor, cancel)


def _render_inline(template: Template, variables: Mapping[str, Any], seconds: float) -> str:
    _current.budget = _Budget(seconds)
    text = TextBuilder()
    try:
        for piece in template.generate(**variables):  # checked while produced
            text.add(piece)
        return text.text()
    except TemplateError as exc:
        raise NodeRunError("dsl.node.templateError", detail=str(exc)) from exc
    finally:
        _current.budget = None


def _render_isolated(
    template: str,
    variables: Mapping[str, Any],
    executor: CodeExecutor | None,
    cancel: Cancellable | None,
) -> str:
    if executor is None:
        raise NodeRunError("errors.template.noSandbox")
    try:
        result = executor.execute(
            "jinja2",
            template,
            jsonable(dict(variables)),
            cancel=cancel,
            options={"options": OPTIONS, "max_chars": MAX_OUTPUT_CHARS},
        )
    except CodeExecutionError as exc:
        raise _template_error(exc) from exc
    text = result.get("result")
    if not isinstance(text, str):
        raise NodeRunError("dsl.node.templateError", detail="no text")
    return text


_SANDBOX_TO_TEMPLATE = {
    "errors.code.timeout": "errors.template.timeout",
    "errors.code.cpuLimit": "errors.template.cpuLimit",
    "errors.code.memoryLimit": "errors.template.memoryLimit",
}


def _template_error(exc: CodeExecutionError) -> Exception:
    """The sandbox's view of a failed render, in the words of templates."""
    key = exc.message_key
    if key in _SANDBOX_TO_TEMPLATE:
        error = type(exc)(_SANDBOX_TO_TEMPLATE[key], **exc.params)
        return error
    if key == "errors.code.textLimit":
        return too_long(int(exc.params.get("size") or MAX_OUTPUT_CHARS + 1), MAX_OUTPUT_CHARS)
    if key in ("errors.code.exception", "errors.code.exceptionAtLine"):
        return NodeRunError("dsl.node.templateError", detail=str(exc.params.get("message", "")))
    return exc
