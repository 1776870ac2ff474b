"""The validated workflow graph: nodes with typed data, edges with handles.

A container node (iteration, loop) has a graph of its own, `Graph.children[id]`:
the nodes whose parent it is and the edges between them, starting at its
round-start node (or, in older exports, at its first node). Every graph
lists only its own nodes; `Graph.all_nodes` (on the workflow's graph) has
every node of every level.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

from firstgate.nodes.base import Needs
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.spec import NodeSpec


@dataclass(frozen=True, slots=True)
class NodeDef:
    id: str
    title: str
    type: str
    spec: NodeSpec
    data: BaseNodeData
    needs: Needs  # what the node declared it needs (model providers, streams, writes)
    parent: str | None = None  # the container it belongs to

    @property
    def has_fail_branch(self) -> bool:
        return self.data.error_strategy == "fail-branch"

    @property
    def retries(self) -> int:
        config = self.data.retry_config
        return config.max_retries if self.spec.supports_retry and config.retry_enabled else 0


@dataclass(frozen=True, slots=True)
class EdgeDef:
    id: str
    source: str
    target: str
    handle: str


@dataclass
class Graph:
    nodes: dict[str, NodeDef]
    edges: list[EdgeDef]
    start_id: str
    # Container node id -> its graph (for the containers among `nodes`).
    children: dict[str, Graph] = field(default_factory=dict)
    _out: dict[str, list[EdgeDef]] = field(default_factory=dict)
    _in: dict[str, list[EdgeDef]] = field(default_factory=dict)
    # Edge -> its position (exported edge ids are not always unique).
    edge_index: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        out: dict[str, list[EdgeDef]] = defaultdict(list)
        into: dict[str, list[EdgeDef]] = defaultdict(list)
        for edge in self.edges:
            out[edge.source].append(edge)
            into[edge.target].append(edge)
        self._out, self._in = dict(out), dict(into)
        self.edge_index = {id(e): i for i, e in enumerate(self.edges)}

    @cached_property
    def all_nodes(self) -> dict[str, NodeDef]:
        """Every node of this graph and of the graphs inside its containers."""
        found = dict(self.nodes)
        for child in self.children.values():
            found.update(child.all_nodes)
        return found

    def graphs(self) -> Iterator[Graph]:
        """This graph and every graph inside its containers."""
        yield self
        for child in self.children.values():
            yield from child.graphs()

    def reachable_nodes(self) -> list[NodeDef]:
        """The nodes a run can reach, containers' insides included."""
        found = [self.nodes[node_id] for node_id in self.nodes if node_id in self.reachable]
        for container_id, child in self.children.items():
            if container_id in self.reachable:
                found.extend(child.reachable_nodes())
        return found

    def out_edges(self, node_id: str) -> list[EdgeDef]:
        return self._out.get(node_id, [])

    def in_edges(self, node_id: str) -> list[EdgeDef]:
        return self._in.get(node_id, [])

    @cached_property
    def reachable(self) -> frozenset[str]:
        seen = {self.start_id}
        stack = [self.start_id]
        while stack:
            for edge in self.out_edges(stack.pop()):
                if edge.target not in seen:
                    seen.add(edge.target)
                    stack.append(edge.target)
        return frozenset(seen)


def find_cycle(node_ids: list[str], edges: list[tuple[str, str]]) -> list[str] | None:
    """One cycle as a list of node ids (first repeated at the end), or None."""
    successors: dict[str, list[str]] = defaultdict(list)
    for source, target in edges:
        successors[source].append(target)
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    for root in node_ids:
        if root in state:
            continue
        path: list[str] = []
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, index = stack.pop()
            if index == 0:
                state[node] = 1
                path.append(node)
            nexts = successors.get(node, [])
            if index < len(nexts):
                stack.append((node, index + 1))
                target = nexts[index]
                if state.get(target) == 1:
                    return path[path.index(target) :] + [target]
                if target not in state:
                    stack.append((target, 0))
            else:
                state[node] = 2
                path.pop()
    return None
