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

from nodes.files import File


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
