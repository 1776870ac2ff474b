"""How a variable's value becomes text, the two ways Dify does it.

`as_text` is what a prompt or a condition value sees (Dify's `Segment.text`);
`as_markdown` is what an answer or an end node streams (Dify's
`Segment.markdown`). They differ for objects (compact JSON vs indented JSON),
arrays (JSON for strings, Python's notation otherwise, vs a "- item" list)
and files (nothing vs a markdown link). Dify's graph-engine tests pin these
down, so they are reproduced here, quirks included: `True`, not `true`.
"""

from __future__ import annotations

import json
from typing import Any

from firstgate.common.files import File
from firstgate.common.rendering import TextBudget, TextBuilder
from firstgate.nodes.base import VariableReader
from firstgate.nodes.selectors import TextSegment, parse_template


def as_text(value: Any) -> str:
    if value is None or isinstance(value, File):
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, default=_jsonable)
    if isinstance(value, list | tuple):
        items = list(value)
        if not items or all(isinstance(item, File) for item in items):
            return ""
        if all(isinstance(item, str) for item in items):
            return json.dumps(items, ensure_ascii=False)
        return str(items)
    return str(value)


def as_markdown(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, File):
        return value.markdown
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, indent=2, default=_jsonable)
    if isinstance(value, list | tuple):
        items = list(value)
        if items and all(isinstance(item, File) for item in items):
            return "\n".join(item.markdown for item in items)
        return "\n".join(f"- {item}" for item in items)
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, File):
        return value.to_dict()
    return str(value)


def jsonable(value: Any) -> Any:
    """A value with every File replaced by Dify's serialized file (for events and the store)."""
    if isinstance(value, File):
        return value.to_dict()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def render_text(template: str, variables: VariableReader, budget: TextBudget | None = None) -> str:
    """A `{{#node.var#}}` template as a prompt or condition sees it; unset renders empty.

    The text is capped while it is built (`common.rendering`); pass `budget` to
    count several renders against one cap (the messages of one prompt).
    """
    return _render(template, variables, as_text, budget)


def render_markdown(template: str, variables: VariableReader) -> str:
    """A `{{#node.var#}}` template as an answer shows it (capped the same way)."""
    return _render(template, variables, as_markdown, None)


def _render(template: str, variables: VariableReader, show: Any, budget: TextBudget | None) -> str:
    text = TextBuilder(budget)
    for segment in parse_template(template):
        if isinstance(segment, TextSegment):
            text.add(segment.text)
        else:
            text.add(show(variables.get(segment.selector)))
    return text.text()
