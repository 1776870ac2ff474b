"""Which nodes run before which: answers "is A upstream of B?" for many pairs at once.

The loader asks this once per selector (a node may only read the outputs of
nodes upstream of it). Walking the ancestors of every node is quadratic (a
chain of 20,000 nodes took minutes); this is linear for chains and trees and
stays bounded for any graph:

1. Topological order (Kahn), then *segments*: maximal runs of nodes where
   each link is the only way out of one node and the only way into the next.
   Within a segment, A is upstream of B iff A comes first; a whole chain is
   one segment, so a chain costs no more than reading it.
2. Between segments, one sweep in topological order carries, for each
   segment, the set of asked-about source segments that reach it, as bits of
   a Python int. Sources are taken `CHUNK` at a time, so memory stays at
   `segments x CHUNK` bits whatever the graph; a graph with S source segments
   costs ceil(S / CHUNK) sweeps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

# Source segments per sweep: memory is (segments x CHUNK / 8) bytes at most.
CHUNK = 2048


class Ancestry:
    """The upstream relation of one graph, built in one topological pass.

    `acyclic` is False when the graph has a cycle (then nothing can be asked).
    """

    def __init__(self, node_ids: Iterable[str], edges: Iterable[tuple[str, str]]) -> None:
        nodes = list(node_ids)
        self.segment, self.position, self.predecessors = _segments(nodes, edges)
        self.acyclic = len(self.segment) == len(nodes)

    def upstream(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        """For each (a, b) in `pairs`: whether a path leads from node a to node b."""
        assert self.acyclic, "upstream() needs an acyclic graph"
        segment, position = self.segment, self.position
        answers = [False] * len(pairs)
        asked: dict[int, list[tuple[int, int]]] = {}  # source segment -> (pair, target segment)
        for index, (source, target) in enumerate(pairs):
            source_segment, target_segment = segment[source], segment[target]
            if source_segment == target_segment:
                answers[index] = position[source] < position[target]
            elif source_segment < target_segment:  # segments are numbered in topological order
                asked.setdefault(source_segment, []).append((index, target_segment))
        sources = sorted(asked)
        for start in range(0, len(sources), CHUNK):
            group = sources[start : start + CHUNK]
            bits = {source: 1 << k for k, source in enumerate(group)}
            reached = _sweep(self.predecessors, group[0], bits)
            for source in group:
                for index, target in asked[source]:
                    answers[index] = bool(reached[target] & bits[source])
        return answers


def _sweep(predecessors: list[list[int]], first: int, bits: dict[int, int]) -> list[int]:
    """For every segment, the bits of the `bits` sources upstream of it."""
    reached = [0] * len(predecessors)
    for segment in range(first + 1, len(predecessors)):
        found = 0
        for predecessor in predecessors[segment]:
            if predecessor >= first:
                found |= reached[predecessor] | bits.get(predecessor, 0)
        reached[segment] = found
    return reached


def _segments(
    node_ids: list[str], edges: Iterable[tuple[str, str]]
) -> tuple[dict[str, int], dict[str, int], list[list[int]]]:
    """Segment and position of each node, and each segment's predecessor segments;
    segments are numbered in topological order. Nodes on or behind a cycle are
    left out (the caller compares counts)."""
    index = {node: i for i, node in enumerate(node_ids)}
    count = len(node_ids)
    successors: list[list[int]] = [[] for _ in range(count)]
    sources: list[list[int]] = [[] for _ in range(count)]
    for source, target in dict.fromkeys(edges):  # two edges between the same nodes: one link
        successors[index[source]].append(index[target])
        sources[index[target]].append(index[source])
    waiting = [len(before) for before in sources]
    ready = deque(i for i in range(count) if not waiting[i])
    segment_of = [-1] * count
    position_of = [0] * count
    predecessors: list[list[int]] = []
    while ready:
        node = ready.popleft()
        before = sources[node]
        if len(before) == 1 and len(successors[before[0]]) == 1:
            # The only way out of the node before and the only way in here: one segment.
            segment_of[node] = segment_of[before[0]]
            position_of[node] = position_of[before[0]] + 1
        else:
            segment_of[node] = len(predecessors)
            predecessors.append(sorted({segment_of[p] for p in before}))
        for following in successors[node]:
            waiting[following] -= 1
            if not waiting[following]:
                ready.append(following)
    segment = {node: segment_of[i] for node, i in index.items() if segment_of[i] >= 0}
    position = {node: position_of[i] for node, i in index.items() if segment_of[i] >= 0}
    return segment, position, predecessors
