"""What a node type is to the runtime: the one `SPEC = NodeSpec(...)` each node
module declares, and that `nodes/registry.py` collects.

Keyword arguments only: a misspelt hook (`handels=`) is a TypeError when the
module is imported, never a hook silently left out. What most nodes leave out
has a default: the PLAIN role, no older type names, the success edge only, no
needs, no variables read, no outputs, no retries, run on a worker thread.
`__post_init__` refuses what cannot work: a response node without a template,
a container role without a `ContainerSpec` (or one on another role), a root
without `accepts` (or `accepts` on another role), a trigger that is not a
root, and a node without `run` unless it is a round start (the engine never
runs those).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from firstgate.nodes.base import (
    NO_NEEDS,
    SUCCESS_HANDLE,
    ContainerSpec,
    Needs,
    NodeContext,
    NodeResult,
    Role,
)
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.selectors import Segment, Selector


def _no_selectors(data: Any) -> list[Selector]:
    return []


def _no_outputs(data: Any) -> set[str]:
    return set()


def _success_only(data: Any) -> set[str]:
    return {SUCCESS_HANDLE}


def _no_needs(data: Any) -> Needs:
    return NO_NEEDS


def _repeatable(data: Any) -> bool:
    return True


def _never_runs(data: Any, ctx: NodeContext) -> NodeResult:
    """A round start's `run`: the engine takes its edges without running it."""
    raise RuntimeError("a round start never runs")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    # Dify's `type` name, and older names the same node went by.
    type: str
    aliases: tuple[str, ...] = ()
    # What the node is to the engine (`nodes.base.Role`).
    role: Role = Role.PLAIN
    # The DSL fields it reads (fixed word sets as `Literal` types).
    data_model: type[BaseNodeData]
    run: Callable[[Any, NodeContext], NodeResult] = _never_runs
    # The variables it reads, and the outputs the rest of the graph may read.
    selectors: Callable[[Any], list[Selector]] = _no_selectors
    output_names: Callable[[Any], set[str]] = _no_outputs
    supports_retry: bool = False
    # Handles a node's outgoing edges may use besides the error handle.
    handles: Callable[[Any], set[str]] = _success_only
    # Model providers it calls, outputs it streams, variables it writes.
    needs: Callable[[Any], Needs] = _no_needs
    # Response nodes: the text and variables they stream, in order.
    template: Callable[[Any], list[Segment]] | None = None
    # A branch node's handles under the default-value strategy (None: the success edges).
    default_handles: Callable[[Any, dict[str, Any]], frozenset[str]] | None = None
    # Runs on the dispatcher (pure computation, no waiting): no thread hand-off.
    inline: bool = False
    # Containers: how their rounds go.
    container: ContainerSpec | None = None
    # Whether running it twice is harmless. A run resumed after a crash runs its
    # in-flight nodes again (at least once); one that says False (a POST request,
    # a tool, code) fails the resumed run instead of repeating its effect.
    repeatable: Callable[[Any], bool] = _repeatable
    # A root node: what it makes of the run's inputs (the start node checks its
    # declared variables, a trigger what its trigger hands over), given the
    # app's upload config; raises the node's `InputError`s.
    accepts: Callable[[Any, Mapping[str, Any], Mapping[str, Any] | None], dict[str, Any]] | None = (
        None
    )
    # A trigger (webhook, schedule): a root that something outside starts, never
    # beside a start node, only in a workflow app.
    trigger: bool = False
    # How many nodes of this type one workflow may hold (None: any number);
    # the loader refuses the first one past it.
    most_per_workflow: int | None = None

    def __post_init__(self) -> None:
        if self.role is Role.RESPONSE and self.template is None:
            raise TypeError(f"response node {self.type!r} declares no template")
        if (self.role is Role.CONTAINER) != (self.container is not None):
            raise TypeError(
                f"node {self.type!r}: a container role declares a ContainerSpec, "
                "and only a container does"
            )
        if (self.role is Role.ROOT) != (self.accepts is not None):
            raise TypeError(f"node {self.type!r}: a root declares what it accepts, and only a root")
        if self.trigger and self.role is not Role.ROOT:
            raise TypeError(f"node {self.type!r}: a trigger is a root")
        if self.most_per_workflow is not None and self.most_per_workflow < 1:
            raise TypeError(f"node {self.type!r}: most_per_workflow is at least 1")
        if self.run is _never_runs and self.role is not Role.ROUND_START:
            raise TypeError(f"node {self.type!r} declares no run")
