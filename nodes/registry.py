"""The node types this runtime supports, by their Dify `type` name, and the
Dify node types it knows but does not run yet (refused by name).

A node module declares what it is: `TYPE` (and older names in `ALIASES`),
`ROLE` (`nodes.base.Role`, PLAIN when absent), `Data`, `run`, `selectors`,
`output_names`, `SUPPORTS_RETRY`; optionally `handles` (the edge handles a
branch may take), `needs` (model providers, streamed outputs, variables it
writes), `INLINE` (it only computes, in a moment: the engine runs it on its
dispatcher, with no thread hand-off), for response nodes `template` (what it
streams) and for containers `CONTAINER` (a `ContainerSpec`: how its rounds go).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from firstgate.nodes import (
    agent,
    answer,
    assigner,
    code,
    document_extractor,
    end,
    http_request,
    if_else,
    iteration,
    knowledge_retrieval,
    list_operator,
    llm,
    loop,
    loop_end,
    parameter_extractor,
    question_classifier,
    round_start,
    start,
    template_transform,
    tool,
    variable_aggregator,
)
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


@dataclass(frozen=True, slots=True)
class NodeSpec:
    type: str
    role: Role
    data_model: type[BaseNodeData]
    run: Callable[[BaseNodeData, NodeContext], NodeResult]
    selectors: Callable[[BaseNodeData], list[Selector]]
    output_names: Callable[[BaseNodeData], set[str]]
    supports_retry: bool
    # Handles a node's outgoing edges may use besides the error handle.
    handles: Callable[[BaseNodeData], set[str]]
    needs: Callable[[BaseNodeData], Needs]
    # Response nodes: the text and variables they stream, in order.
    template: Callable[[BaseNodeData], list[Segment]] | None = None
    # A branch node's handles under the default-value strategy (None: the success edges).
    default_handles: Callable[[BaseNodeData, dict[str, Any]], frozenset[str]] | None = None
    # Runs on the dispatcher (pure computation, no waiting): no thread hand-off.
    inline: bool = False
    # Containers: how their rounds go.
    container: ContainerSpec | None = None


def _no_needs(data: BaseNodeData) -> Needs:
    return NO_NEEDS


def _success_only(data: BaseNodeData) -> set[str]:
    return {SUCCESS_HANDLE}


def _spec(module: ModuleType, type_name: str) -> NodeSpec:
    role = getattr(module, "ROLE", Role.PLAIN)
    template = getattr(module, "template", None)
    if role is Role.RESPONSE and template is None:
        raise TypeError(f"response node module {module.__name__} declares no template")
    container = getattr(module, "CONTAINER", None)
    if (role is Role.CONTAINER) != (container is not None):
        raise TypeError(f"node module {module.__name__}: a container declares CONTAINER")
    return NodeSpec(
        type=type_name,
        role=role,
        data_model=module.Data,
        run=module.run,
        selectors=module.selectors,
        output_names=module.output_names,
        supports_retry=module.SUPPORTS_RETRY,
        handles=getattr(module, "handles", _success_only),
        needs=getattr(module, "needs", _no_needs),
        template=template,
        default_handles=getattr(module, "default_handles", None),
        inline=getattr(module, "INLINE", False),
        container=container,
    )


MODULES: tuple[ModuleType, ...] = (
    start,
    end,
    answer,
    llm,
    question_classifier,
    parameter_extractor,
    agent,
    if_else,
    template_transform,
    variable_aggregator,
    assigner,
    http_request,
    code,
    knowledge_retrieval,
    tool,
    document_extractor,
    list_operator,
    iteration,
    loop,
    round_start,
    loop_end,
)

NODE_TYPES: dict[str, NodeSpec] = {
    name: _spec(module, name)
    for module in MODULES
    for name in (module.TYPE, *getattr(module, "ALIASES", ()))
}

# Dify node types that are not supported yet: a workflow using one is refused
# with one message per such node, naming the type and the node.
KNOWN_UNSUPPORTED: frozenset[str] = frozenset(
    {
        "human-input",
        "datasource",
        "knowledge-index",
        "trigger-webhook",
        "trigger-schedule",
        "trigger-plugin",
    }
)
