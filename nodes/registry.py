"""The node types this runtime supports, by their Dify `type` name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from nodes import (
    answer,
    code,
    document_extractor,
    end,
    http_request,
    if_else,
    knowledge_retrieval,
    llm,
    question_classifier,
    start,
    template_transform,
    tool,
    variable_aggregator,
)
from nodes.base import SUCCESS_HANDLE, NodeContext, NodeResult
from nodes.config import BaseNodeData
from nodes.selectors import Selector


@dataclass(frozen=True, slots=True)
class NodeSpec:
    type: str
    data_model: type[BaseNodeData]
    run: Callable[[BaseNodeData, NodeContext], NodeResult]
    selectors: Callable[[BaseNodeData], list[Selector]]
    output_names: Callable[[BaseNodeData], set[str]]
    supports_retry: bool
    # Handles a node's outgoing edges may use besides the error handle.
    handles: Callable[[BaseNodeData], set[str]]
    # Runs code through `ctx.code_executor` (the runtime starts it with the run).
    uses_code_executor: bool = False
    # A branch node's handles under the default-value strategy (None: the success edges).
    default_handles: Callable[[BaseNodeData, dict[str, Any]], frozenset[str]] | None = None
    # The DSL `model.provider` names it calls (their routes are checked before the run).
    model_providers: Callable[[BaseNodeData], set[str]] = lambda data: set()


def _spec(module: ModuleType) -> NodeSpec:
    return NodeSpec(
        type=module.TYPE,
        data_model=module.Data,
        run=module.run,
        selectors=module.selectors,
        output_names=module.output_names,
        supports_retry=module.SUPPORTS_RETRY,
        handles=getattr(module, "handles", lambda data: {SUCCESS_HANDLE}),
        uses_code_executor=getattr(module, "USES_CODE_EXECUTOR", False),
        default_handles=getattr(module, "default_handles", None),
        model_providers=getattr(module, "model_providers", lambda data: set()),
    )


NODE_TYPES: dict[str, NodeSpec] = {
    m.TYPE: _spec(m)
    for m in (
        start,
        end,
        answer,
        llm,
        question_classifier,
        if_else,
        template_transform,
        variable_aggregator,
        http_request,
        code,
        knowledge_retrieval,
        tool,
        document_extractor,
    )
}
