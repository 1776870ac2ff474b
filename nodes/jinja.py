"""One sandboxed Jinja2 environment for user templates (template-transform, LLM jinja2 prompts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import SandboxedEnvironment

from nodes.base import NodeRunError

# Dify caps template output; an unbounded template can exhaust memory.
MAX_OUTPUT_CHARS = 400_000

_ENV = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True)


def render_jinja(template: str, variables: Mapping[str, Any]) -> str:
    try:
        text = _ENV.from_string(template).render(**variables)
    except TemplateError as exc:
        raise NodeRunError(
            "dsl.node.templateError",
            f"the Jinja2 template failed: {exc}",
            detail=str(exc),
        ) from exc
    if len(text) > MAX_OUTPUT_CHARS:
        raise NodeRunError(
            "dsl.node.templateTooLong",
            f"the template rendered {len(text)} characters, more than {MAX_OUTPUT_CHARS}",
            size=len(text),
            limit=MAX_OUTPUT_CHARS,
        )
    return text
