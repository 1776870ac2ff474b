"""The node types this runtime supports, by their Dify `type` name, and the
Dify node types it knows but does not run yet (refused by name).

Each node module declares what it is in one `SPEC = NodeSpec(...)`
(`nodes/spec.py`: its type and older names, role, DSL model, `run`, the
variables it reads, its outputs, retry, edge handles, needs, inline, template,
container); this module only collects them. Keyword arguments and validation
make a misspelt or missing hook fail when the module is imported.
"""

from __future__ import annotations

from firstgate.nodes import (
    agent,
    answer,
    assigner,
    code,
    document_extractor,
    end,
    http_request,
    human_input,
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
    trigger_schedule,
    trigger_webhook,
    variable_aggregator,
)
from firstgate.nodes.spec import NodeSpec

SPECS: tuple[NodeSpec, ...] = (
    start.SPEC,
    end.SPEC,
    answer.SPEC,
    llm.SPEC,
    question_classifier.SPEC,
    parameter_extractor.SPEC,
    agent.SPEC,
    if_else.SPEC,
    template_transform.SPEC,
    variable_aggregator.SPEC,
    assigner.SPEC,
    http_request.SPEC,
    code.SPEC,
    knowledge_retrieval.SPEC,
    tool.SPEC,
    document_extractor.SPEC,
    list_operator.SPEC,
    iteration.SPEC,
    loop.SPEC,
    round_start.SPEC,
    loop_end.SPEC,
    human_input.SPEC,
    trigger_webhook.SPEC,
    trigger_schedule.SPEC,
)


def _by_name(specs: tuple[NodeSpec, ...]) -> dict[str, NodeSpec]:
    found: dict[str, NodeSpec] = {}
    for spec in specs:
        for name in (spec.type, *spec.aliases):
            if name in found:
                raise TypeError(f"node type {name!r} is declared twice")
            found[name] = spec
    return found


NODE_TYPES: dict[str, NodeSpec] = _by_name(SPECS)

# Dify node types that are not supported yet: a workflow using one is refused
# with one message per such node, naming the type and the node.
KNOWN_UNSUPPORTED: frozenset[str] = frozenset(
    {
        "datasource",
        "knowledge-index",
        "trigger-plugin",
    }
)
# Of those, the ones a run would start at: a workflow rooted at one is refused for
# that node, not for lacking a start node.
UNSUPPORTED_ROOTS: frozenset[str] = frozenset({"trigger-plugin"})
