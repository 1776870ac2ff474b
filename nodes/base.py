"""What every node gets from the engine, and what it gives back.

Nodes see only these types: the engine satisfies them, so nodes never import it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from locales.localized_error import LocalizedError
from nodes.cancel import CancelToken
from nodes.rendering import TextBudget, TextBuilder
from nodes.selectors import Selector, TextSegment, parse_template

# What nodes see of the routes (re-exported: the client layer owns them).
from plugin_daemon_client.plan import ClientProvider as ClientProvider
from plugin_daemon_client.plan import Clients as Clients
from plugin_daemon_client.plan import RoutePlan as RoutePlan
from plugin_daemon_client.plan import RoutePlanner as RoutePlanner
from plugin_daemon_client.plan import RouteTarget as RouteTarget
from plugin_daemon_client.plan import plan_for as plan_for

if TYPE_CHECKING:
    from connectors.hub import Connectors
    from plugin_daemon_client.fallback import FallbackEvent
    from plugin_daemon_client.gate import WaitInfo
    from sandbox.executor import CodeExecutor

# In a node's `output_names`: it may also set outputs not known at load time
# (a plugin tool's variables), so selectors into it are checked when it runs.
ANY_OUTPUT = "*"

# Edge handles. Success edges are `source`; Dify's older exports say `success-branch`.
SUCCESS_HANDLE = "source"
LEGACY_SUCCESS_HANDLE = "success-branch"
FAIL_HANDLE = "fail-branch"


class VariableReader(Protocol):
    def get(self, selector: Selector) -> Any:
        """The value at `selector`, or None when it was never set."""
        ...


class ChunkSink(Protocol):
    def __call__(self, text: str, target: str | None = None) -> None: ...


class WaitSink(Protocol):
    def __call__(self, info: WaitInfo, target: str | None = None) -> None: ...


def _ignore_chunk(text: str, target: str | None = None) -> None:
    return None


def _ignore_wait(info: WaitInfo, target: str | None = None) -> None:
    return None


def _ignore_event(event: FallbackEvent) -> None:
    return None


class NodeRunError(LocalizedError):
    """A node failed for a reason of its own (not the transport's)."""


@dataclass(slots=True)
class NodeContext:
    """Everything one node attempt may use."""

    node_id: str
    attempt: int
    variables: VariableReader
    cancel: CancelToken
    # `target` names the model route that produced the text or the wait (a
    # fallback chain tries several per attempt), None when unknown.
    emit_chunk: ChunkSink = _ignore_chunk
    emit_wait: WaitSink = _ignore_wait
    # Swaps, caps, skips and budget stops of a fallback chain.
    emit_fallback: Callable[[FallbackEvent], None] = _ignore_event
    clients: Clients | None = None
    inputs: Mapping[str, Any] = field(default_factory=dict)
    # Runs untrusted code and templates that need a process of their own.
    code_executor: CodeExecutor | None = None
    # HTTP, knowledge and tool clients, built by the runtime from its settings file.
    connectors: Connectors | None = None


@dataclass(slots=True)
class NodeResult:
    """Outputs plus which outgoing edge handles to follow (None: the success edges)."""

    outputs: dict[str, Any] = field(default_factory=dict)
    handles: frozenset[str] | None = None
    # How the node did it (Dify's process_data): e.g. the LLM node's resolved
    # first-token budget and which route answered. Not a variable.
    process_data: Mapping[str, Any] | None = None


def to_text(value: Any) -> str:
    """How a variable renders inside a text template (Dify: objects and arrays as JSON)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def render_selectors(
    template: str, variables: VariableReader, budget: TextBudget | None = None
) -> str:
    """Replace every `{{#node.var#}}` with its value; a missing value renders empty.

    The text is capped while it is built (`nodes.rendering`); pass `budget` to
    count several renders against one cap (the messages of one prompt).
    """
    text = TextBuilder(budget)
    for segment in parse_template(template):
        if isinstance(segment, TextSegment):
            text.add(segment.text)
        else:
            text.add(to_text(variables.get(segment.selector)))
    return text.text()
