"""`{{#node_id.var#}}` selectors: parsing templates into text and variable segments."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Dify's selector syntax: node id (or `sys`/`env`/`conversation`), then one or
# more dotted names. The node id is digits or an identifier.
SELECTOR_PATTERN = re.compile(
    r"\{\{#([a-zA-Z0-9_]{1,50}(?:\.[a-zA-Z_][a-zA-Z0-9_]{0,29}){1,10})#\}\}"
)

Selector = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TextSegment:
    text: str


@dataclass(frozen=True, slots=True)
class VariableSegment:
    selector: Selector


Segment = TextSegment | VariableSegment


def parse_template(template: str) -> list[Segment]:
    """Split a template into literal text and selector segments, in order."""
    segments: list[Segment] = []
    pos = 0
    for match in SELECTOR_PATTERN.finditer(template):
        if match.start() > pos:
            segments.append(TextSegment(template[pos : match.start()]))
        segments.append(VariableSegment(tuple(match.group(1).split("."))))
        pos = match.end()
    if pos < len(template):
        segments.append(TextSegment(template[pos:]))
    return segments


def template_selectors(template: str) -> list[Selector]:
    return [s.selector for s in parse_template(template) if isinstance(s, VariableSegment)]
