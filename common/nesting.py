"""How deep data from outside may nest: one bound for every structured input.

YAML documents (`common/yaml_reader.py`) and JSON inputs (`nodes/start.py`)
are refused past `MAX_DEPTH` levels of lists and mappings. Dify's exports nest
about 15 levels deep; 100 leaves room and keeps every recursive consumer
(pydantic, json, rendering, the store) far from Python's stack limit.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 100


def deeper_than(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether lists and dicts in `value` nest more than `limit` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    # A shared container is walked again only when met deeper: at most `limit` times.
    deepest: dict[int, int] = {}
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list) or deepest.get(id(item), 0) >= depth:
            continue
        if depth > limit:
            return True
        deepest[id(item)] = depth
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return False
