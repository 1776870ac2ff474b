"""Load a Dify DSL document into a validated graph, collecting every problem.

`runtime.workflow.load_workflow` makes the `Workflow` of what this returns (the
workflow module sits above this one, so that a run can load the workflows its
workflow tools name with the same function)."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from firstgate.common.dsl import QUOTE_LIMIT, shown
from firstgate.common.problems import (
    DslError,
    NodeRef,
    Problem,
    SourcePlace,
    problems_from_validation,
)
from firstgate.common.sections import Sections, validation_context
from firstgate.common.yaml_reader import Places, read_yaml_mapping
from firstgate.nodes.base import ANY_OUTPUT, FAIL_HANDLE, Role
from firstgate.nodes.registry import KNOWN_UNSUPPORTED, NODE_TYPES, UNSUPPORTED_ROOTS
from firstgate.nodes.templates.jinja import counting_templates
from firstgate.runtime.dsl.ancestry import Ancestry
from firstgate.runtime.dsl.app_modes import EasyApp, compile_document
from firstgate.runtime.dsl.dsl_models import Document, Edge, RawNode
from firstgate.runtime.dsl.graph import EdgeDef, Graph, NodeDef, find_cycle
from firstgate.runtime.execution.variable_pool import (
    SYS_VARIABLES,
    USER_INPUT,
    USER_INPUT_VARIABLES,
    start_sys_alias,
)
from firstgate.runtime.models.routes import ModelRoutes
from pydantic import ValidationError

if TYPE_CHECKING:
    from firstgate.runtime.settings import RuntimeSettings

# Nodes the editor draws that are not part of the flow (sticky notes).
_DECORATIVE_NODE_TYPES = {"custom-note"}
ERROR_OUTPUTS = {"error_message", "error_type"}


def read_document(source: str | Path) -> dict[str, Any]:
    """Parse a DSL file into a mapping; every problem is a located DslError."""
    return read_yaml_mapping(source)


@dataclass(frozen=True, slots=True)
class LoadedDocument:
    """A validated document: its graph, how many distinct templates its nodes
    render, the easy-mode app it was compiled from and the file stem (for the app id)."""

    document: Document
    graph: Graph
    templates: int
    easy: EasyApp | None = None
    stem: str | None = None
    # What Dify loads but runs its own way: located problems, not errors.
    warnings: list[Problem] = field(default_factory=list)


def load_document(
    source: str | Path | Mapping[str, Any],
    *,
    settings: RuntimeSettings | None = None,
    stem: str | None = None,
) -> LoadedDocument:
    """A DSL file path or an already-parsed mapping, validated.

    `settings` (the runtime settings the workflow will run with) lets a node
    check what only the settings can supply, e.g. the definition of an `api`
    tool. `stem` is the export's file name without its suffix (a path gives
    its own): part of the app id, so two exports of one name are two apps.
    Raises DslError listing every problem found, not only the first.
    """
    with collector_paused():
        places = None
        if isinstance(source, Mapping):
            raw = dict(source)
        else:
            places = Places(source)  # each problem names the line of its node or edge
            raw = read_yaml_mapping(source, places=places)
            stem = Path(source).stem if stem is None else stem
        # An easy-mode app (chat, agent-chat, completion) becomes its graph first.
        raw, easy = compile_document(raw, Sections(settings))
        return _Loader(raw, settings, easy, places, stem).load()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Loading allocates hundreds of thousands of objects and frees none: the
    cyclic collector would rescan the growing heap again and again (loading a
    100,000-node file took twice as long with it). Runs after loading see no change."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _Loader:
    def __init__(
        self,
        raw: dict[str, Any],
        settings: RuntimeSettings | None = None,
        easy: EasyApp | None = None,
        places: Places | None = None,
        stem: str | None = None,
    ) -> None:
        self.raw = raw
        self.easy = easy
        self.places = places
        self.stem = stem
        self.settings = settings
        # Node models read their sections from the validation context (`common.sections`).
        self.context = validation_context(Sections(settings))
        self.problems: list[Problem] = []
        # What Dify loads but runs in its own way (an edge never taken, a value
        # missing): reported, never refused.
        self.warnings: list[Problem] = list(easy.warnings) if easy is not None else []
        # Nodes that failed validation: references to them are not reported twice.
        self.broken: set[str] = set()
        self.dropped_edges = False

    def load(self) -> LoadedDocument:
        try:
            document = Document.model_validate(self.raw)
        except ValidationError as exc:
            raise DslError(problems_from_validation(exc)) from None
        try:
            return self._load(document)
        except DslError as exc:
            raise DslError(self._located(exc.problems)) from None

    def _load(self, document: Document) -> LoadedDocument:
        with counting_templates() as templates:
            nodes = self._nodes(document.workflow.graph.nodes)
        self._containers(nodes)
        edges = self._edges(document.workflow.graph.edges, nodes)
        start_id = self._start(nodes, document.app.mode)
        self._counted(nodes)
        roots = self._round_roots(nodes, edges)
        # Ancestry over every level: a container runs before its rounds' nodes.
        pairs = [(e.source, e.target) for e in edges] + list(roots.items())
        ancestry = Ancestry(nodes, pairs)
        if not ancestry.acyclic:
            cycle = find_cycle(list(nodes), pairs) or []
            self.problems.append(
                Problem(
                    "dsl.graph.cycle",
                    {"cycle": " -> ".join(_label(nodes[n]) for n in cycle)},
                    place=self._node_places().get(cycle[0]) if cycle else None,
                )
            )
        env = {v.name: v.value for v in document.workflow.environment_variables}
        conversation = {v.name for v in document.workflow.conversation_variables}
        graph = None if start_id is None else _build_graph(nodes, edges, start_id, roots)
        if graph is not None and ancestry.acyclic:
            self._selectors(graph, ancestry, env, conversation)
        if self.problems:
            raise DslError(self.problems)
        assert graph is not None
        return LoadedDocument(
            document, graph, len(templates), self.easy, self.stem, self._located(self.warnings)
        )

    def _containers(self, nodes: dict[str, NodeDef]) -> None:
        """Each node inside a container names one that exists and is a container;
        round-start nodes are inside one."""
        for node in list(nodes.values()):
            parent = node.parent
            if parent is None:
                if node.spec.role is Role.ROUND_START:
                    self.problems.append(Problem("dsl.container.partOutside", {}, _ref(node)))
                    self.broken.add(node.id)
                    del nodes[node.id]
                continue
            container = nodes.get(parent)
            if container is None or container.spec.container is None:
                if parent not in self.broken:
                    self.problems.append(
                        Problem("dsl.container.unknownParent", {"parent": parent}, _ref(node))
                    )
                self.broken.add(node.id)
                del nodes[node.id]
        for node in nodes.values():  # a container inside itself, through its parents
            seen = {node.id}
            parent = node.parent
            while parent is not None and parent in nodes:
                if parent in seen:
                    self.problems.append(Problem("dsl.container.insideItself", {}, _ref(node)))
                    break
                seen.add(parent)
                parent = nodes[parent].parent

    def _round_roots(self, nodes: dict[str, NodeDef], edges: list[EdgeDef]) -> dict[str, str]:
        """Container id -> the node its rounds start at: its `start_node_id`, or in
        older exports (no round-start node) its one inside node nothing leads to."""
        inside: dict[str, list[str]] = {}
        for node in nodes.values():
            if node.parent is not None:
                inside.setdefault(node.parent, []).append(node.id)
        targets = {e.target for e in edges}
        roots: dict[str, str] = {}
        for node in nodes.values():
            spec = node.spec.container
            if spec is None:
                continue
            members = inside.get(node.id, [])
            named = spec.round_root(node.data)
            if named in members:
                roots[node.id] = named
                continue
            candidates = [m for m in members if m not in targets]
            if len(candidates) == 1:
                roots[node.id] = candidates[0]
            else:
                self.problems.append(
                    Problem("dsl.container.noStart", {"start": named or "?"}, _ref(node))
                )
                self.broken.add(node.id)  # what runs before its nodes is unknown
        return roots

    def _nodes(self, raw_nodes: list[dict[str, Any]]) -> dict[str, NodeDef]:
        nodes: dict[str, NodeDef] = {}
        unrun_containers = _unrun_containers(raw_nodes)
        for index, raw_node in enumerate(raw_nodes):
            place = self._item_place("nodes", index)
            parent = _container_of(raw_node)
            if parent is not None and parent in unrun_containers:
                # Inside a container that is refused as a whole: its nodes are
                # part of it, not problems of their own.
                self.broken.add(str(raw_node.get("id")))
                continue
            try:
                node = RawNode.model_validate(raw_node)
            except ValidationError as exc:
                self.problems.extend(
                    _at(
                        place,
                        problems_from_validation(exc, prefix=f"workflow.graph.nodes[{index}]"),
                    )
                )
                continue
            if node.type in _DECORATIVE_NODE_TYPES:
                continue
            node_type = _plain(node.data.get("type", ""))
            ref = NodeRef(node.id, _plain(node.data.get("title", "")), node_type or "?")
            if node.id in nodes:
                self.problems.append(Problem("dsl.node.duplicateId", {}, ref, place=place))
                continue
            spec = NODE_TYPES.get(node_type)
            if spec is None:
                self.broken.add(node.id)
                self.problems.extend(_at(place, [_unsupported(node_type, ref)]))
                continue
            noted: list[tuple[str, dict[str, Any]]] = []
            self.context["warnings"] = noted  # a node model's `note_warning`s
            try:
                data = spec.data_model.model_validate(node.data, context=self.context)
            except ValidationError as exc:
                self.problems.extend(_at(place, problems_from_validation(exc, ref)))
                self.broken.add(node.id)
                continue
            self.warnings.extend(_at(place, [Problem(k, p, ref) for k, p in noted]))
            nodes[node.id] = NodeDef(
                node.id, data.title, node_type, spec, data, spec.needs(data), parent
            )
            self.problems.extend(self._schema_problems(nodes[node.id], ref))
        return nodes

    def _schema_problems(self, node: NodeDef, ref: NodeRef) -> Iterator[Problem]:
        """A node's answer schema that a route it may take cannot express (only
        with the settings the workflow will run with)."""
        settings = self.settings
        if settings is None or not node.needs.json_schemas:
            return
        routes = ModelRoutes(settings)
        for provider in sorted(node.needs.model_providers):
            for schema in node.needs.json_schemas:
                for route, kind, why in routes.schema_problems(provider, dict(schema)):
                    params = {"route": route, "kind": kind, "detail": why}
                    yield Problem("dsl.models.schemaUnsupported", params, ref)

    def _edges(self, raw_edges: list[dict[str, Any]], nodes: dict[str, NodeDef]) -> list[EdgeDef]:
        edges: list[EdgeDef] = []
        known_ids = {str(n.get("id")) for n in self.raw_nodes()}
        handles: dict[str, set[str]] = {}  # node id -> the handles its edges may leave by
        for index, raw_edge in enumerate(raw_edges):
            place = self._item_place("edges", index)
            try:
                edge = Edge.model_validate(raw_edge)
            except ValidationError as exc:
                self.problems.extend(
                    _at(
                        place,
                        problems_from_validation(exc, prefix=f"workflow.graph.edges[{index}]"),
                    )
                )
                continue
            # An edge without an id is named by its position, counted from 1 (and its line).
            name = edge.id or f"#{index + 1}"
            missing = [end for end in (edge.source, edge.target) if end not in known_ids]
            for end in missing:
                self.problems.append(
                    Problem("dsl.edge.missingNode", {"edge": name, "node": end}, place=place)
                )
            if missing or edge.source not in nodes or edge.target not in nodes:
                self.dropped_edges = True
                continue  # the node itself was reported
            source = nodes[edge.source]
            if source.parent != nodes[edge.target].parent:
                self.problems.append(
                    Problem(
                        "dsl.edge.crossesContainer",
                        {"edge": name, "node": edge.target},
                        _ref(source),
                        place=place,
                    )
                )
                self.dropped_edges = True
                continue
            allowed = handles.get(source.id)
            if allowed is None:
                allowed = handles[source.id] = source.spec.handles(source.data) | (
                    {FAIL_HANDLE} if source.has_fail_branch else set()
                )
            if edge.sourceHandle not in allowed:
                # Dify loads it and never takes it (a case or class deleted in the editor).
                self.warnings.append(
                    Problem(
                        "dsl.warning.edgeHandle",
                        {
                            "edge": name,
                            "handle": edge.sourceHandle,
                            "allowed": ", ".join(sorted(allowed)),
                        },
                        _ref(source),
                        place=place,
                    )
                )
                continue
            edges.append(EdgeDef(name, edge.source, edge.target, edge.sourceHandle))
        return edges

    def _place(self, raw: Any) -> SourcePlace | None:
        return None if self.places is None else self.places.of(raw)

    def _item_place(self, kind: str, index: int) -> SourcePlace | None:
        """Where `workflow.graph.<kind>[index]` is written (validation copied the items,
        so they are looked up in the document as read)."""
        if self.places is None:
            return None
        items = self.raw.get("workflow", {}).get("graph", {}).get(kind)
        return self._place(items[index]) if isinstance(items, list) and index < len(items) else None

    def _node_places(self) -> dict[str, SourcePlace]:
        """Node id -> where the node is written (the first node of that id)."""
        found: dict[str, SourcePlace] = {}
        for raw_node in self.raw_nodes():
            place = self._place(raw_node)
            if place is not None:
                found.setdefault(str(raw_node.get("id")), place)
        return found

    def _located(self, problems: list[Problem]) -> list[Problem]:
        """Every problem about a node, and not yet placed, gets the node's line."""
        if self.places is None or all(p.place or p.node is None for p in problems):
            return problems
        places = self._node_places()
        return [
            dataclasses.replace(p, place=places.get(p.node.id))
            if p.place is None and p.node is not None
            else p
            for p in problems
        ]

    def raw_nodes(self) -> list[dict[str, Any]]:
        graph = self.raw.get("workflow", {}).get("graph", {})
        return [n for n in graph.get("nodes", []) if isinstance(n, dict)]

    def _start(self, nodes: dict[str, NodeDef], mode: str) -> str | None:
        """The node a run starts at: the start node, or the first trigger. A
        workflow starts from one start node or from its triggers (several may
        feed one graph, Dify's rule), never both; triggers only in a workflow app."""
        roots = [n for n in nodes.values() if n.spec.role is Role.ROOT and n.parent is None]
        if not roots:
            start_declared = any(
                isinstance(n.get("data"), dict) and _root_type(n["data"].get("type"))
                for n in self.raw_nodes()
            )
            if not start_declared:  # a broken or refused root was reported already
                self.problems.append(Problem("dsl.graph.noStart", {}))
            return None
        starts = [n for n in roots if not n.spec.trigger]
        triggers = [n for n in roots if n.spec.trigger]
        for extra in starts[1:]:
            self.problems.append(
                Problem("dsl.graph.multipleStarts", {"first": starts[0].id}, _ref(extra))
            )
        if starts and triggers:
            self.problems.append(
                Problem("dsl.graph.startWithTrigger", {"start": starts[0].id}, _ref(triggers[0]))
            )
        if triggers and mode != "workflow":
            self.problems.append(
                Problem("dsl.trigger.notWorkflow", {"mode": mode}, _ref(triggers[0]))
            )
        return roots[0].id

    def _counted(self, nodes: dict[str, NodeDef]) -> None:
        """Node types a workflow may hold only so many of (`NodeSpec.most_per_workflow`):
        the first node past the limit is the problem, wherever it sits."""
        seen: dict[str, int] = {}
        for node in nodes.values():
            limit = node.spec.most_per_workflow
            if limit is None:
                continue
            seen[node.spec.type] = count = seen.get(node.spec.type, 0) + 1
            if count == limit + 1:
                total = sum(1 for n in nodes.values() if n.spec.type == node.spec.type)
                self.problems.append(
                    Problem(
                        "dsl.graph.tooMany",
                        {"type": node.spec.type, "count": total, "limit": limit},
                        _ref(node),
                    )
                )

    def _selectors(
        self, graph: Graph, ancestry: Ancestry, env: dict[str, Any], conversation: set[str]
    ) -> None:
        nodes = graph.all_nodes
        scopes = _scopes(nodes)
        # (reader, selector, reads at the end of a round of): a node reads its
        # selectors; a container reads its round selectors inside its rounds.
        checks: list[tuple[NodeDef, tuple[str, ...], bool]] = [
            (node, selector, False)
            for node in nodes.values()
            for selector in node.spec.selectors(node.data)
            if selector[0] not in self.broken
        ]
        checks += [
            (node, selector, True)
            for node in nodes.values()
            if node.spec.container is not None
            for selector in node.spec.container.round_selectors(node.data)
            if selector[0] not in self.broken
        ]
        upstream = self._upstream(nodes, scopes, ancestry, checks)
        outputs: dict[tuple[str, bool], set[str]] = {}  # (node, inside) -> names, once
        for (node, selector, in_round), is_upstream in zip(checks, upstream, strict=True):
            inside = scopes[node.id] + ((node.id,) if in_round else ())
            problem = _check_selector(
                selector, node, graph, inside, is_upstream, env, outputs, conversation
            )
            if problem and problem.message_key == "dsl.warning.notUpstream":
                self.warnings.append(problem)  # Dify runs it: the value is missing then
            elif problem:
                self.problems.append(problem)
        for node in nodes.values():
            for written in sorted(node.needs.writes):
                if not _writable(written, scopes[node.id], nodes):
                    self.problems.append(
                        Problem(
                            "dsl.selector.notWritable", {"selector": ".".join(written)}, _ref(node)
                        )
                    )

    def _upstream(
        self,
        nodes: dict[str, NodeDef],
        scopes: dict[str, tuple[str, ...]],
        ancestry: Ancestry,
        checks: list[tuple[NodeDef, tuple[str, ...], bool]],
    ) -> list[bool | None]:
        """For each selector that names a node: whether that node runs before the reader
        (all pairs at once: linear for chains and trees, see `runtime.ancestry`). What a
        container reads at the end of a round may be any node of its rounds."""
        if self.broken or self.dropped_edges:
            # With broken nodes or edges left out, ancestry is incomplete: don't guess.
            return [None] * len(checks)

        def within(node: NodeDef, head: str, in_round: bool) -> bool:
            # What a container reads after a round: itself, or a node of its rounds.
            return in_round and (head == node.id or node.id in scopes[head])

        pairs = [
            (sel[0], node.id)
            for node, sel, in_round in checks
            if sel[0] in nodes and not within(node, sel[0], in_round)
        ]
        answers = iter(ancestry.upstream(pairs))
        found: list[bool | None] = []
        for node, selector, in_round in checks:
            head = selector[0]
            if head not in nodes:
                found.append(None)
            elif within(node, head, in_round):
                found.append(True)
            else:
                found.append(next(answers))
        return found


def _scopes(nodes: dict[str, NodeDef]) -> dict[str, tuple[str, ...]]:
    """Node id -> the containers it is inside, innermost first."""
    scopes: dict[str, tuple[str, ...]] = {}
    for node in nodes.values():
        chain: list[str] = []
        parent = node.parent
        while parent is not None and parent in nodes and parent not in chain:
            chain.append(parent)
            parent = nodes[parent].parent
        scopes[node.id] = tuple(chain)
    return scopes


def _writable(
    selector: tuple[str, ...], inside: tuple[str, ...], nodes: dict[str, NodeDef]
) -> bool:
    """Conversation variables, and the variables of a container the writer is inside
    that its rounds may write (a loop's variables)."""
    if selector[0] == "conversation":
        return True
    if selector[0] not in inside or len(selector) != 2:
        return False
    container = nodes[selector[0]]
    spec = container.spec.container
    return spec is not None and selector[1] in spec.writable(container.data)


def _build_graph(
    nodes: dict[str, NodeDef], edges: list[EdgeDef], start_id: str, roots: dict[str, str]
) -> Graph:
    """The workflow's graph, with each container's graph inside it."""
    members: dict[str | None, dict[str, NodeDef]] = {}
    for node in nodes.values():
        members.setdefault(node.parent, {})[node.id] = node
    links: dict[str | None, list[EdgeDef]] = {}
    for edge in edges:
        links.setdefault(nodes[edge.source].parent, []).append(edge)

    def build(parent: str | None, start: str) -> Graph:
        own = members.get(parent, {})
        children = {
            # A container without a start was reported; its graph is still checked.
            node_id: build(node_id, roots.get(node_id, ""))
            for node_id, node in own.items()
            if node.spec.container is not None
        }
        return Graph(nodes=own, edges=links.get(parent, []), start_id=start, children=children)

    return build(None, start_id)


def _at(place: SourcePlace | None, problems: list[Problem]) -> list[Problem]:
    """The problems, each placed at `place` unless it has a place of its own."""
    if place is None:
        return problems
    return [p if p.place is not None else dataclasses.replace(p, place=place) for p in problems]


def _root_type(node_type: Any) -> bool:
    """Whether a node of this type would be a run's root (the start node, a
    trigger, or a trigger refused by name)."""
    if not isinstance(node_type, str):
        return False
    spec = NODE_TYPES.get(node_type)
    return node_type in UNSUPPORTED_ROOTS or (spec is not None and spec.role is Role.ROOT)


def _plain(value: Any) -> str:
    """A node's type or title as a message may quote it: short, never expanded."""
    if isinstance(value, str):
        return value if len(value) <= QUOTE_LIMIT else value[:QUOTE_LIMIT] + "…"
    return shown(value)


def _container_of(raw_node: Any) -> str | None:
    """The iteration or loop a node belongs to (`parentId`, or older `iteration_id`)."""
    if not isinstance(raw_node, dict):
        return None
    data = raw_node.get("data") if isinstance(raw_node.get("data"), dict) else {}
    parent = raw_node.get("parentId") or data.get("iteration_id") or data.get("loop_id")
    return str(parent) if parent else None


def _unrun_containers(raw_nodes: list[Any]) -> set[str]:
    """Container nodes of a type this runtime does not run."""
    found: set[str] = set()
    for raw_node in raw_nodes:
        data = raw_node.get("data") if isinstance(raw_node, dict) else None
        if isinstance(data, dict) and str(data.get("type", "")) not in NODE_TYPES:
            found.add(str(raw_node.get("id")))
    return found


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


def _inner_names(node: NodeDef) -> set[str]:
    """What a container's rounds read under its id (`item`, `index`, loop variables)."""
    spec = node.spec.container
    return spec.inner_names(node.data) if spec is not None else set()


def _check_selector(
    selector: tuple[str, ...],
    node: NodeDef,
    graph: Graph,
    inside: tuple[str, ...],
    upstream: bool | None,
    env: dict[str, Any],
    outputs: dict[tuple[str, bool], set[str]],
    conversation: set[str],
) -> Problem | None:
    text = ".".join(selector)
    # `[root, "sys.x"]` is `sys.x` for every root (each trigger starts runs of its own).
    named = graph.nodes.get(selector[0])
    root = named.id if named is not None and named.spec.role is Role.ROOT else graph.start_id
    selector = start_sys_alias(selector, root) or selector
    head, name = selector[0], selector[1]
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
    target = graph.all_nodes.get(head)
    if target is None:
        return Problem("dsl.selector.unknownNode", {"selector": text, "node": head}, _ref(node))
    # Inside a container, its id names what its rounds read (`item`, loop variables).
    within = head in inside
    names = outputs.get((head, within))
    if names is None:
        names = outputs[(head, within)] = _inner_names(target) if within else output_names(target)
    if name not in names and ANY_OUTPUT not in names:
        return Problem(
            "dsl.selector.unknownVariable",
            {
                "selector": text,
                "node": _label(target),
                "variable": name,
                "available": ", ".join(sorted(names)) or "(none)",
            },
            _ref(node),
        )
    # A response node may show a node that does not run before it (Dify's own
    # fixtures do): its stream waits for that node, or leaves it out if skipped.
    if upstream is False and node.spec.role is not Role.RESPONSE:
        return Problem(
            "dsl.warning.notUpstream", {"selector": text, "node": _label(target)}, _ref(node)
        )
    return None
