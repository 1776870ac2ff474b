"""One sandboxed Jinja2 environment for user templates (template-transform, LLM jinja2 prompts)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jinja2 import Template, TemplateError
from jinja2.sandbox import SandboxedEnvironment

from nodes.base import NodeRunError
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


def render_jinja(template: str, variables: Mapping[str, Any]) -> str:
    text = TextBuilder()
    try:
        for piece in _compiled(template).generate(**variables):  # checked while produced
            text.add(piece)
    except TemplateError as exc:
        raise NodeRunError("dsl.node.templateError", detail=str(exc)) from exc
    return text.text()
