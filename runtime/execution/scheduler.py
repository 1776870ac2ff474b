"""Which nodes are ready: edge states, joins and skip propagation.

An edge is pending until its source finishes; then it is taken or skipped.
A node is ready when every incoming edge is resolved and at least one was
taken (a join waits for all branches that ran). A node whose incoming edges
were all skipped is skipped itself, and its outgoing edges with it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from firstgate.nodes.base import SUCCESS_HANDLE
from firstgate.runtime.dsl.graph import EdgeDef, Graph


class EdgeState(Enum):
    PENDING = "pending"
    TAKEN = "taken"
    SKIPPED = "skipped"


class NodeState(Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    SKIPPED = "skipped"


@dataclass(slots=True)
class Step:
    """What one finished node changed: edges it took, nodes that became ready,
    nodes that will never run (every way in was skipped)."""

    taken: list[EdgeDef] = field(default_factory=list)
    ready: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


class Scheduler:
    """Edge and node states of one run of one graph. Each node counts its edges
    not yet resolved and those taken, so a join of N branches costs N steps in
    all, not N per branch."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        # Edges are keyed by position: exported edge ids are not always unique.
        self._edge_index = graph.edge_index
        # One byte per edge (`_EDGE_CODES`): a checkpoint copies it as it is.
        self._edges = bytearray(b"p") * len(graph.edges)
        self._nodes = dict.fromkeys(graph.nodes, NodeState.PENDING)
        self._skipped: list[str] = []  # in the order they were skipped
        # Nodes with incoming edges resolved and some still pending (the frontier):
        # incoming edges still pending, and those taken.
        self._unresolved: dict[str, int] = {}
        self._taken: dict[str, int] = {}

    def edge_state(self, edge: EdgeDef) -> EdgeState:
        return _EDGE_STATES[self._edges[self._edge_index[id(edge)]]]

    def node_state(self, node_id: str) -> NodeState:
        return self._nodes[node_id]

    def mark_running(self, node_id: str) -> None:
        self._nodes[node_id] = NodeState.RUNNING

    def saved(self) -> dict[str, Any]:
        """What a checkpoint keeps of this scheduler (`restore` takes it back): a
        character per edge (`p`ending, `t`aken, `s`kipped), the skipped nodes, the
        frontier's counts. Which nodes are done is not kept: those whose outputs
        the checkpoint holds."""
        return {
            "edges": self._edges.decode("ascii"),
            "skipped": list(self._skipped),
            "unresolved": dict(self._unresolved),
            "taken": dict(self._taken),
        }

    def restore(self, state: Mapping[str, Any], done: Iterable[str]) -> None:
        """The states `saved()` gave (for the same graph); `done`: the finished nodes."""
        edges = str(state["edges"]).encode("ascii")
        if len(edges) != len(self._edges) or edges.strip(b"pts"):
            raise ValueError("the checkpoint's edges are not this graph's")
        self._edges = bytearray(edges)
        for node_id, node_state in [
            *((n, NodeState.DONE) for n in done),
            *((n, NodeState.SKIPPED) for n in state["skipped"]),
        ]:
            if node_id not in self._nodes:
                raise ValueError(f"the checkpoint names node {node_id!r}, not in this graph")
            self._nodes[node_id] = node_state
        self._skipped = [str(n) for n in state["skipped"]]
        self._unresolved = {str(k): int(v) for k, v in state["unresolved"].items()}
        self._taken = {str(k): int(v) for k, v in state["taken"].items()}

    def taken_edges(self) -> list[int]:
        """The positions of the edges taken so far."""
        return [i for i, code in enumerate(self._edges) if code == _TAKEN_EDGE]

    def reset(self, node_id: str) -> None:
        """A node that was running when the checkpoint was taken: not started again yet."""
        self._nodes[node_id] = NodeState.PENDING

    def roots(self) -> list[str]:
        return [self.graph.start_id]

    def complete(self, node_id: str, handles: Iterable[str] | None) -> Step:
        """Record a finished node: its edges, then which nodes became ready (in
        edge order) or were skipped. `handles` None means the success edges (`source`)."""
        chosen = frozenset(handles) if handles is not None else _SUCCESS
        self._nodes[node_id] = NodeState.DONE
        step = Step()
        resolved: list[tuple[str, bool]] = []
        for edge in self.graph.out_edges(node_id):
            taken = edge.handle in chosen
            self._set(edge, _TAKEN_EDGE if taken else _SKIPPED_EDGE)
            if taken:
                step.taken.append(edge)
            resolved.append((edge.target, taken))
        self._settle(resolved, step)
        return step

    def _set(self, edge: EdgeDef, code: int) -> None:
        self._edges[self._edge_index[id(edge)]] = code

    def _settle(self, resolved: list[tuple[str, bool]], step: Step) -> None:
        """Count each resolved edge at its target; a target with nothing pending
        is ready (one way in was taken) or skipped (none was), and a skip skips
        the edges out of it."""
        work = deque(resolved)
        while work:
            node_id, taken = work.popleft()
            left = self._unresolved.get(node_id)
            if left is None:
                left = len(self.graph.in_edges(node_id))
            left -= 1
            if taken:
                self._taken[node_id] = self._taken.get(node_id, 0) + 1
            if left > 0:
                self._unresolved[node_id] = left
                continue  # a branch that may still run has not finished
            # Every way in is resolved: nothing more arrives here (the frontier moves on).
            self._unresolved.pop(node_id, None)
            was_taken = self._taken.pop(node_id, 0)
            if self._nodes[node_id] is not NodeState.PENDING:
                continue
            if was_taken:
                step.ready.append(node_id)
                continue
            # Every way in was skipped: skip this node and everything only it feeds.
            self._nodes[node_id] = NodeState.SKIPPED
            self._skipped.append(node_id)
            step.skipped.append(node_id)
            for edge in self.graph.out_edges(node_id):
                self._set(edge, _SKIPPED_EDGE)
                work.append((edge.target, False))


_SUCCESS = frozenset({SUCCESS_HANDLE})
_PENDING_EDGE, _TAKEN_EDGE, _SKIPPED_EDGE = b"p"[0], b"t"[0], b"s"[0]
_EDGE_STATES = {
    _PENDING_EDGE: EdgeState.PENDING,
    _TAKEN_EDGE: EdgeState.TAKEN,
    _SKIPPED_EDGE: EdgeState.SKIPPED,
}
