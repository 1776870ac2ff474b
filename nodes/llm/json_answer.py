"""A model's JSON answer, read tolerantly: small local models wrap JSON in
prose or code fences, think aloud first (`<think>...</think>`), or leave a
trailing comma or an unclosed brace. One reader for every node that asks a
model for JSON (question classifier, parameter extractor, structured output).

What counts as "no JSON at all" is decided here too: text with no JSON
object in it (after the repairs below) is `None`, and each node says what
that means for it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import json_repair

# Reasoning models put their thoughts first; the answer follows the tag.
_THINK = re.compile(r"<think[^>]*>.*?</think>", re.IGNORECASE | re.DOTALL)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
# The repairer is pure Python and slow on huge inputs: a model answer past
# this size is read strictly only.
MAX_REPAIR_CHARS = 256 * 1024
# How many opening braces are tried as the start of the answer's object.
MAX_OPENINGS = 64


def strip_think(text: str) -> str:
    """`text` without reasoning blocks (and a dangling unclosed `<think>` head)."""
    if "<think" not in text.lower():
        return text
    text = _THINK.sub("", text)
    head = text.lower().find("<think")
    return text[:head] if head >= 0 else text


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _object(value: Any) -> dict[str, Any] | None:
    """A JSON object, or the one object in a one-element list."""
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        return value[0]
    return None


def _balanced_span(text: str, start: int) -> str | None:
    """The `{...}` span opening at `start` whose braces balance (strings
    respected), or None when it never closes."""
    depth, in_string, escaped = 0, False, False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start : index + 1]
    return None


def _first_balanced_object(text: str) -> dict[str, Any] | None:
    """The first balanced `{...}` that parses as an object; at most
    `MAX_OPENINGS` opening braces are tried (the text is untrusted)."""
    start = text.find("{")
    for _ in range(MAX_OPENINGS):
        if start < 0:
            return None
        span = _balanced_span(text, start)
        if span is None:
            return None  # never closed: the repairer may still read it
        found = _object(_loads(span))
        if found is not None:
            return found
        start = text.find("{", start + 1)
    return None


def read_json_object(text: str) -> dict[str, Any] | None:
    """The JSON object a model answered, or None when there is none.

    In order: the whole answer as JSON; the inside of a code fence; the first
    balanced `{...}` that parses; the answer from its first `{` through the
    repairer (trailing commas, missing closing braces, single quotes).
    """
    text = strip_think(text).strip()
    found = _object(_loads(text))
    if found is not None:
        return found
    for fenced in _FENCE.findall(text):
        found = _object(_loads(fenced.strip()))
        if found is not None:
            return found
    found = _first_balanced_object(text)
    if found is not None:
        return found
    brace = text.find("{")
    if brace < 0 or len(text) - brace > MAX_REPAIR_CHARS:
        return None
    try:
        repaired = json_repair.loads(text[brace:])
    except (ValueError, RecursionError):
        return None
    return _object(repaired)
