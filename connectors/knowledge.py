"""What every knowledge backend returns, and Dify's metadata conditions.

A backend answers `search(query, top_k, score_threshold, condition)` with
`Record`s whose score is in [0, 1] (higher is better), so a node can merge
the results of several datasets and apply one threshold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from firstgate.connectors.errors import ConnectorError


class KnowledgeError(ConnectorError):
    message_key = "errors.knowledge.failed"


@dataclass(frozen=True, slots=True)
class Record:
    content: str
    score: float
    title: str = ""
    document_id: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Condition:
    name: str
    comparison_operator: str
    value: Any = None


@dataclass(frozen=True, slots=True)
class MetadataCondition:
    logical_operator: str = "and"
    conditions: Sequence[Condition] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "logical_operator": self.logical_operator,
            "conditions": [
                {"name": c.name, "comparison_operator": c.comparison_operator, "value": c.value}
                for c in self.conditions
            ],
        }


class KnowledgeBackend(Protocol):
    def search(
        self,
        query: str,
        *,
        top_k: int,
        score_threshold: float | None,
        condition: MetadataCondition | None,
    ) -> list[Record]: ...


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _holds(condition: Condition, metadata: Mapping[str, Any]) -> bool:
    actual = metadata.get(condition.name)
    op, expected = condition.comparison_operator, condition.value
    if op == "empty":
        return actual in (None, "", [])
    if op == "not empty":
        return actual not in (None, "", [])
    if actual is None:
        return op in ("not contains", "is not", "≠")
    if op in ("=", "≠", ">", "<", "≥", "≤"):
        a, b = _number(actual), _number(expected)
        if a is None or b is None:
            return False
        return {
            "=": a == b,
            "≠": a != b,
            ">": a > b,
            "<": a < b,
            "≥": a >= b,
            "≤": a <= b,
        }[op]
    text, wanted = str(actual), "" if expected is None else str(expected)
    if op == "contains":
        return wanted in (actual if isinstance(actual, list) else text)
    if op == "not contains":
        return wanted not in (actual if isinstance(actual, list) else text)
    if op == "start with":
        return text.startswith(wanted)
    if op == "end with":
        return text.endswith(wanted)
    if op == "is":
        return text == wanted
    if op == "is not":
        return text != wanted
    if op in ("before", "after"):
        a, b = _number(actual), _number(expected)
        if a is None or b is None:
            return False
        return a < b if op == "before" else a > b
    return False


def matches(condition: MetadataCondition | None, metadata: Mapping[str, Any]) -> bool:
    """Whether a document's metadata satisfies Dify's metadata filtering conditions."""
    if condition is None or not condition.conditions:
        return True
    results = (_holds(c, metadata) for c in condition.conditions)
    return any(results) if condition.logical_operator == "or" else all(results)
