"""What every node gets from the engine, and what it gives back.

Nodes see only these types: the engine satisfies them, so nodes never import it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodes.cancel import CancelToken
from nodes.selectors import Selector, TextSegment, parse_template

# Edge handles. Success edges are `source`; Dify's older exports say `success-branch`.
SUCCESS_HANDLE = "source"
LEGACY_SUCCESS_HANDLE = "success-branch"
FAIL_HANDLE = "fail-branch"


class VariableReader(Protocol):
    def get(self, selector: Selector) -> Any:
        """The value at `selector`, or None when it was never set."""
        ...


class LLMClientLike(Protocol):
    def invoke_llm(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        parameters: dict[str, Any],
        stop: list[str] | None = None,
    ) -> Any: ...


class ClientProvider(Protocol):
    def client_for(self, provider: str) -> LLMClientLike:
        """The transport client for a DSL `model.provider` name."""
        ...


class NodeRunError(Exception):
    """A node failed for a reason of its own (not the transport's): carries a message key."""

    def __init__(self, message_key: str, english: str, **params: Any) -> None:
        super().__init__(english)
        self.message_key = message_key
        self.params = params


@dataclass(slots=True)
class NodeContext:
    """Everything one node attempt may use."""

    node_id: str
    attempt: int
    variables: VariableReader
    cancel: CancelToken
    emit_chunk: Callable[[str], None] = lambda text: None
    emit_wait: Callable[[Any], None] = lambda info: None
    clients: ClientProvider | None = None
    inputs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class NodeResult:
    """Outputs plus which outgoing edge handles to follow (None: the success edges)."""

    outputs: dict[str, Any] = field(default_factory=dict)
    handles: frozenset[str] | None = None
    usage: Mapping[str, Any] | None = None


def to_text(value: Any) -> str:
    """How a variable renders inside a text template (Dify: objects and arrays as JSON)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def render_selectors(template: str, variables: VariableReader) -> str:
    """Replace every `{{#node.var#}}` with its value; a missing value renders empty."""
    parts: list[str] = []
    for segment in parse_template(template):
        if isinstance(segment, TextSegment):
            parts.append(segment.text)
        else:
            parts.append(to_text(variables.get(segment.selector)))
    return "".join(parts)
