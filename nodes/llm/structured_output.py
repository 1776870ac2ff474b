"""The LLM node's structured output: the JSON schema a workflow gives
(`structured_output.schema`), checked when the workflow loads, and the
model's answer read (`nodes/llm/json_answer.py`) and validated against it.

The schema is untrusted (it comes from a workflow file) and so is the answer
(it comes from a model): validation is JSON Schema draft 7 with no remote
`$ref` ever fetched, and every `pattern` / `patternProperties` match runs
with a time limit (the `regex` engine's timeout), so a catastrophic pattern
is a mismatch, not a hung node.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import regex
from firstgate.nodes.base import NodeRunError
from firstgate.nodes.llm.json_answer import read_json_object
from jsonschema import Draft7Validator, ValidationError, validators
from jsonschema.exceptions import SchemaError, best_match
from referencing import Registry
from referencing.exceptions import Unresolvable

# One pattern match may take this long before it counts as a mismatch.
PATTERN_TIMEOUT_S = 0.25
_NO_REMOTE = Registry()  # a `$ref` to anything outside the schema is unresolvable


class StructuredOutputError(NodeRunError):
    """The answer is not JSON, or does not match the schema."""


class PatternTimeout(Exception):
    pass


def _compile(pattern: str) -> Any:
    return regex.compile(pattern)


def _search(pattern: str, text: str) -> bool:
    try:
        return _compile(pattern).search(text, timeout=PATTERN_TIMEOUT_S) is not None
    except TimeoutError:
        raise PatternTimeout(pattern) from None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}"[:300])


def _pattern_properties(
    validator: Any, properties: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in properties.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


_Validator = validators.extend(
    Draft7Validator, {"pattern": _pattern, "patternProperties": _pattern_properties}
)


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """What the JSON Schema checker (or the pattern compiler) says is wrong
    with a workflow's schema, in its own words, or None."""
    try:
        Draft7Validator.check_schema(schema)
    except SchemaError as error:
        return error.message[:300]
    except RecursionError:
        return "RecursionError"
    for pattern in _patterns(schema):
        try:
            _compile(pattern)
        except (regex.error, TypeError) as error:
            return f"pattern {pattern!r}: {error}"[:300]
    return None


def _patterns(node: Any, depth: int = 0) -> Iterator[str]:
    if depth > 64:
        return
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key == "patternProperties" and isinstance(value, Mapping):
                yield from (k for k in value if isinstance(k, str))
            yield from _patterns(value, depth + 1)
    elif isinstance(node, list):
        for item in node:
            yield from _patterns(item, depth + 1)


def parse_and_validate(schema: Mapping[str, Any], answer: str) -> dict[str, Any]:
    """The answer's JSON object, checked against `schema`; a typed error otherwise."""
    found = read_json_object(answer)
    if found is None:
        raise StructuredOutputError("errors.llm.structuredNoJson", answer=_excerpt(answer))
    try:
        error = best_match(_Validator(schema, registry=_NO_REMOTE).iter_errors(found))
    except PatternTimeout as slow:
        raise StructuredOutputError(
            "errors.llm.structuredPatternTimeout", pattern=str(slow)[:120]
        ) from None
    except (Unresolvable, RecursionError):
        raise StructuredOutputError("errors.llm.structuredUnresolvable") from None
    if error is not None:
        raise StructuredOutputError(
            "errors.llm.structuredMismatch", path=error.json_path, detail=error.message[:300]
        )
    return found


def _excerpt(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "…"
