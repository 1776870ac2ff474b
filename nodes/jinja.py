"""One sandboxed Jinja2 environment for user templates (template-transform, LLM jinja2 prompts)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Annotated, Any

from jinja2 import Template, TemplateError, TemplateSyntaxError, nodes
from jinja2.sandbox import SandboxedEnvironment
from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from nodes.base import NodeRunError
from nodes.config import dsl_error, shown
from nodes.rendering import MAX_RENDERED_CHARS, TextBuilder

# Dify caps template output; an unbounded template can exhaust memory. The cap
# and its check are the ones every rendered text has (nodes/rendering.py).
MAX_OUTPUT_CHARS = MAX_RENDERED_CHARS

_ENV = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True)


@lru_cache(maxsize=512)
def _compiled(template: str) -> Template:
    # Compiling costs far more than rendering; a workflow renders the same
    # templates on every run. Compiled templates are safe to share across threads.
    return _ENV.from_string(template)


# Constructs that load other templates: user templates have no loader (and may not
# have one), so these can only fail; say so when the workflow is validated.
_LOADERS = {
    nodes.Include: "{% include %}",
    nodes.Import: "{% import %}",
    nodes.FromImport: "{% from ... import %}",
    nodes.Extends: "{% extends %}",
}


@lru_cache(maxsize=2048)
def template_problem(source: str) -> PydanticCustomError | None:
    """What is wrong with a template that validation can see: its syntax, a
    construct that loads other templates, an attribute the sandbox refuses."""
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
    problem = template_problem(source)
    if problem is not None:
        raise problem
    return source


JinjaSource = Annotated[str, AfterValidator(checked_template)]


def render_jinja(template: str, variables: Mapping[str, Any]) -> str:
    text = TextBuilder()
    try:
        for piece in _compiled(template).generate(**variables):  # checked while produced
            text.add(piece)
    except TemplateError as exc:
        raise NodeRunError("dsl.node.templateError", detail=str(exc)) from exc
    return text.text()
