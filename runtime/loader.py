"""Load a Dify DSL document into a validated `Workflow`, collecting every problem."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nodes.registry import CONTAINER_PARTS, KNOWN_UNSUPPORTED, NODE_TYPES
from runtime.dsl_models import Document, Edge, RawNode
from runtime.graph import EdgeDef, Graph, NodeDef, find_cycle
from runtime.problems import DslError, NodeRef, Problem, problems_from_validation
from runtime.variable_pool import SYS_VARIABLES, USER_INPUT, USER_INPUT_VARIABLES
from runtime.workflow import Workflow, declarations
from runtime.yaml_reader import read_yaml_mapping

# Nodes the editor draws that are not part of the flow (sticky notes).
_DECORATIVE_NODE_TYPES = {"custom-note"}
ERROR_OUTPUTS = {"error_message", "error_type"}


def read_document(source: str | Path) -> dict[str, Any]:
    """Parse a DSL file into a mapping; every problem is a located DslError."""
    return read_yaml_mapping(source)


def load_workflow(source: str | Path | Mapping[str, Any]) -> Workflow:
    """A workflow from a DSL file path or an already-parsed mapping.

    Raises DslError listing every problem found, not only the first.
    """
    raw = dict(source) if isinstance(source, Mapping) else read_document(source)
    return _Loader(raw).load()


class _Loader:
    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.problems: list[Problem] = []
        # Nodes that failed validation: references to them are not reported twice.
        self.broken: set[str] = set()

    def load(self) -> Workflow:
        try:
            document = Document.model_validate(self.raw)
        except ValidationError as exc:
            raise DslError(problems_from_validation(exc)) from None
        nodes = self._nodes(document.workflow.graph.nodes)
        edges = self._edges(document.workflow.graph.edges, nodes)
        start_id = self._start(nodes)
        cycle = find_cycle(list(nodes), [(e.source, e.target) for e in edges])
        if cycle:
            self.problems.append(
                Problem("dsl.graph.cycle", {"cycle": " -> ".join(_label(nodes[n]) for n in cycle)})
            )
        env = {v.name: v.value for v in document.workflow.environment_variables}
        conversation = {v.name for v in document.workflow.conversation_variables}
        if start_id is not None and not cycle:
            graph = Graph(nodes=nodes, edges=edges, start_id=start_id)
            self._selectors(graph, env, conversation)
        if self.problems:
            raise DslError(self.problems)
        assert start_id is not None
        return Workflow(
            name=document.app.name,
            mode=document.app.mode,
            graph=Graph(nodes=nodes, edges=edges, start_id=start_id),
            **declarations(document),
        )

    def _nodes(self, raw_nodes: list[dict[str, Any]]) -> dict[str, NodeDef]:
        nodes: dict[str, NodeDef] = {}
        for index, raw_node in enumerate(raw_nodes):
            try:
                node = RawNode.model_validate(raw_node)
            except ValidationError as exc:
                self.problems.extend(
                    problems_from_validation(exc, prefix=f"workflow.graph.nodes[{index}]")
                )
                continue
            if node.type in _DECORATIVE_NODE_TYPES:
                continue
            node_type = str(node.data.get("type", ""))
            if node_type in CONTAINER_PARTS:
                continue  # part of an iteration or loop: the container is judged as a whole
            ref = NodeRef(node.id, str(node.data.get("title", "")), node_type or "?")
            if node.id in nodes:
                self.problems.append(Problem("dsl.node.duplicateId", {}, ref))
                continue
            spec = NODE_TYPES.get(node_type)
            if spec is None:
                self.broken.add(node.id)
                self.problems.append(_unsupported(node_type, ref))
                continue
            try:
                data = spec.data_model.model_validate(node.data)
            except ValidationError as exc:
                self.problems.extend(problems_from_validation(exc, ref))
                self.broken.add(node.id)
                continue
            nodes[node.id] = NodeDef(node.id, data.title, node_type, spec, data, spec.needs(data))
        return nodes

    def _edges(self, raw_edges: list[dict[str, Any]], nodes: dict[str, NodeDef]) -> list[EdgeDef]:
        edges: list[EdgeDef] = []
        known_ids = {str(n.get("id")) for n in self.raw_nodes()}
        for index, raw_edge in enumerate(raw_edges):
            try:
                edge = Edge.model_validate(raw_edge)
            except ValidationError as exc:
                self.problems.extend(
                    problems_from_validation(exc, prefix=f"workflow.graph.edges[{index}]")
                )
                continue
            name = edge.id or f"#{index}"
            missing = [end for end in (edge.source, edge.target) if end not in known_ids]
            for end in missing:
                self.problems.append(Problem("dsl.edge.missingNode", {"edge": name, "node": end}))
            if missing or edge.source not in nodes or edge.target not in nodes:
                continue  # the node itself was reported
            # A handle the source never takes (a deleted if-else case, a fail
            # branch on a node without that strategy) is kept, as Dify keeps it:
            # the edge is simply never taken.
            edges.append(EdgeDef(name, edge.source, edge.target, edge.sourceHandle))
        return edges

    def raw_nodes(self) -> list[dict[str, Any]]:
        graph = self.raw.get("workflow", {}).get("graph", {})
        return [n for n in graph.get("nodes", []) if isinstance(n, dict)]

    def _start(self, nodes: dict[str, NodeDef]) -> str | None:
        starts = [n for n in nodes.values() if n.type == "start"]
        if not starts:
            start_declared = any(
                isinstance(n.get("data"), dict) and n["data"].get("type") == "start"
                for n in self.raw_nodes()
            )
            if not start_declared:  # a broken start node was reported already
                self.problems.append(Problem("dsl.graph.noStart", {}))
            return None
        for extra in starts[1:]:
            self.problems.append(
                Problem("dsl.graph.multipleStarts", {"first": starts[0].id}, _ref(extra))
            )
        return starts[0].id

    def _selectors(self, graph: Graph, env: dict[str, Any], conversation: set[str]) -> None:
        # Whether the referenced node runs before the reader is not checked: Dify
        # does not either (the value is whatever the node has produced by then,
        # usually nothing), and real exports rely on it.
        for node in graph.nodes.values():
            for selector in node.spec.selectors(node.data):
                if selector[0] in self.broken:
                    continue
                problem = _check_selector(selector, node, graph, env, conversation)
                if problem:
                    self.problems.append(problem)
            for selector in sorted(node.needs.writes):
                if selector[0] != "conversation":
                    self.problems.append(
                        Problem(
                            "dsl.selector.notWritable", {"selector": ".".join(selector)}, _ref(node)
                        )
                    )


def _unsupported(node_type: str, ref: NodeRef) -> Problem:
    """One problem per node of a type this runtime does not run, naming type and node."""
    if node_type in KNOWN_UNSUPPORTED:
        return Problem("dsl.node.unsupportedType", {"type": node_type}, ref)
    return Problem(
        "dsl.node.unknownType",
        {"type": node_type or "(missing)", "supported": ", ".join(sorted(NODE_TYPES))},
        ref,
    )


def _ref(node: NodeDef) -> NodeRef:
    return NodeRef(node.id, node.title, node.type)


def _label(node: NodeDef) -> str:
    return f'{node.id} "{node.title}"'


def output_names(node: NodeDef) -> set[str]:
    names = set(node.spec.output_names(node.data))
    if node.data.error_strategy:
        names |= ERROR_OUTPUTS
    names |= {d.key for d in node.data.default_value}
    return names


def _check_selector(
    selector: tuple[str, ...],
    node: NodeDef,
    graph: Graph,
    env: dict[str, Any],
    conversation: set[str],
) -> Problem | None:
    head, name = selector[0], selector[1]
    text = ".".join(selector)
    if head == USER_INPUT:
        if name not in USER_INPUT_VARIABLES:
            return Problem(
                "dsl.selector.unknownSys",
                {"selector": text, "supported": ", ".join(sorted(USER_INPUT_VARIABLES))},
                _ref(node),
            )
        return None
    if head == "conversation":
        if name not in conversation:
            return Problem("dsl.selector.unknownConversation", {"selector": text}, _ref(node))
        return None
    if head == "sys":
        if name not in SYS_VARIABLES:
            return Problem(
                "dsl.selector.unknownSys",
                {"selector": text, "supported": ", ".join(sorted(SYS_VARIABLES))},
                _ref(node),
            )
        return None
    if head == "env":
        if name not in env:
            return Problem("dsl.selector.unknownEnv", {"selector": text}, _ref(node))
        return None
    target = graph.nodes.get(head)
    if target is None:
        return Problem("dsl.selector.unknownNode", {"selector": text, "node": head}, _ref(node))
    if name not in output_names(target):
        return Problem(
            "dsl.selector.unknownVariable",
            {
                "selector": text,
                "node": _label(target),
                "variable": name,
                "available": ", ".join(sorted(output_names(target))) or "(none)",
            },
            _ref(node),
        )
    return None
