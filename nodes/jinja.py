"""One sandboxed Jinja2 environment for user templates (template-transform, LLM jinja2 prompts)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jinja2 import Template, TemplateError
from jinja2.sandbox import SandboxedEnvironment

from nodes.base import NodeRunError

# Dify caps template output; an unbounded template can exhaust memory.
MAX_OUTPUT_CHARS = 400_000

_ENV = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True)


@lru_cache(maxsize=512)
def _compiled(template: str) -> Template:
    # Compiling costs far more than rendering; a workflow renders the same
    # templates on every run. Compiled templates are safe to share across threads.
    return _ENV.from_string(template)


def render_jinja(template: str, variables: Mapping[str, Any]) -> str:
    try:
        text = _compiled(template).render(**variables)
    except TemplateError as exc:
        raise NodeRunError("dsl.node.templateError", detail=str(exc)) from exc
    if len(text) > MAX_OUTPUT_CHARS:
        raise NodeRunError("dsl.node.templateTooLong", size=len(text), limit=MAX_OUTPUT_CHARS)
    return text
