"""Streams answer nodes (and, in flows without answers, end nodes) while the
run is still going: literal text and finished variables as soon as the node
is sure to run, LLM text chunk by chunk as it arrives.

An answer streams only once it is sure to run if the nodes now running
succeed: an if-else that has not decided yet holds it back; an LLM with a
fail-branch does not (streaming keeps working with fail-branch enabled).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from nodes.base import SUCCESS_HANDLE, to_text
from nodes.rendering import MAX_RENDERED_CHARS
from nodes.selectors import Segment, TextSegment, VariableSegment, parse_template
from runtime.graph import Graph
from runtime.scheduler import EdgeState, NodeState, Scheduler
from runtime.variable_pool import VariablePool


@dataclass(frozen=True, slots=True)
class Piece:
    """Text for target `target_id`; `source`/`attempt` name the LLM attempt it came from."""

    target_id: str
    text: str
    source: str | None = None
    attempt: int | None = None


@dataclass(slots=True)
class _Target:
    node_id: str
    segments: list[Segment]
    cursor: int = 0
    live: str | None = None  # the LLM node whose chunks pass straight through
    buffers: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    done: bool = False


def _targets(graph: Graph) -> list[_Target]:
    answers = [n for n in graph.nodes.values() if n.type == "answer"]
    if answers:
        return [_Target(n.id, parse_template(n.data.answer)) for n in answers]  # type: ignore[attr-defined]
    targets = []
    for node in graph.nodes.values():
        if node.type != "end":
            continue
        # An end node streams only the LLM text it outputs, in order.
        segments: list[Segment] = [
            VariableSegment(o.value_selector)
            for o in node.data.outputs  # type: ignore[attr-defined]
            if o.value_selector[0] in graph.nodes
            and graph.nodes[o.value_selector[0]].type == "llm"
            and tuple(o.value_selector[1:]) == ("text",)
        ]
        if segments:
            targets.append(_Target(node.id, segments))
    return targets


class AnswerStreamer:
    def __init__(self, graph: Graph, scheduler: Scheduler, pool: VariablePool) -> None:
        self.graph = graph
        self.scheduler = scheduler
        self.pool = pool
        self.targets = {t.node_id: t for t in _targets(graph)}
        self.streamed: dict[str, int] = {}  # target -> characters streamed so far

    def _llm_text_source(self, segment: Segment) -> str | None:
        if isinstance(segment, VariableSegment) and segment.selector[1:] == ("text",):
            node = self.graph.nodes.get(segment.selector[0])
            if node is not None and node.type == "llm":
                return node.id
        return None

    def on_chunk(self, source: str, attempt: int, text: str) -> list[Piece]:
        return self._capped(self._on_chunk(source, attempt, text))

    def _on_chunk(self, source: str, attempt: int, text: str) -> list[Piece]:
        pieces: list[Piece] = []
        for target in self.targets.values():
            if target.done:
                continue
            if target.live == source:
                pieces.append(Piece(target.node_id, text, source, attempt))
            elif any(self._llm_text_source(s) == source for s in target.segments[target.cursor :]):
                target.buffers.setdefault(source, []).append((attempt, text))
                pieces.extend(self._advance(target))
        return pieces

    def on_retry(self, source: str) -> None:
        # Buffered text of a failed attempt will never be shown: the next attempt replaces it.
        for target in self.targets.values():
            target.buffers.pop(source, None)

    def advance_all(self) -> list[Piece]:
        pieces: list[Piece] = []
        for target in self.targets.values():
            pieces.extend(self._advance(target))
        return self._capped(pieces)

    def finish(self, target_id: str) -> list[Piece]:
        """The target node itself ran: emit whatever it has not streamed yet."""
        target = self.targets.get(target_id)
        if target is None or target.done:
            return []
        pieces = self._advance(target, force=True)
        target.done = True
        return self._capped(pieces)

    def _capped(self, pieces: list[Piece]) -> list[Piece]:
        """What a target streams stops at the rendering cap (`nodes.rendering`);
        the node's own render then fails with the cap's error."""
        kept: list[Piece] = []
        for piece in pieces:
            room = MAX_RENDERED_CHARS - self.streamed.get(piece.target_id, 0)
            if room <= 0:
                continue
            if len(piece.text) > room:
                piece = dataclasses.replace(piece, text=piece.text[:room])
            self.streamed[piece.target_id] = self.streamed.get(piece.target_id, 0) + len(piece.text)
            kept.append(piece)
        return kept

    def _advance(self, target: _Target, force: bool = False) -> list[Piece]:
        pieces: list[Piece] = []
        if target.done or not (force or self._will_run(target.node_id, {})):
            return pieces
        while target.cursor < len(target.segments):
            segment = target.segments[target.cursor]
            if isinstance(segment, TextSegment):
                if segment.text:
                    pieces.append(Piece(target.node_id, segment.text))
                target.cursor += 1
                continue
            source = self._llm_text_source(segment)
            owner = segment.selector[0]
            finished = owner in ("sys", "env") or (
                owner in self.graph.nodes and self.scheduler.node_state(owner) is NodeState.DONE
            )
            if source is not None and target.live == source:
                if not finished:
                    return pieces  # still streaming
                target.live = None  # its text has been streamed in full
                target.cursor += 1
                continue
            if finished or force:
                target.buffers.pop(source or "", None)
                text = to_text(self.pool.get(segment.selector))
                if text:
                    pieces.append(Piece(target.node_id, text, source))
                target.cursor += 1
                continue
            if source is not None and self.scheduler.node_state(source) is NodeState.RUNNING:
                for attempt, text in target.buffers.pop(source, []):
                    pieces.append(Piece(target.node_id, text, source, attempt))
                target.live = source
            return pieces
        return pieces

    def _will_run(self, node_id: str, memo: dict[str, bool]) -> bool:
        """Whether the node runs if every node now running succeeds."""
        if node_id in memo:
            return memo[node_id]
        memo[node_id] = False  # guards against revisiting while deciding
        state = self.scheduler.node_state(node_id)
        if state is NodeState.SKIPPED:
            return False
        if state is not NodeState.PENDING:
            memo[node_id] = True
            return True
        result = False
        for edge in self.graph.in_edges(node_id):
            edge_state = self.scheduler.edge_state(edge)
            if edge_state is EdgeState.TAKEN:
                result = True
            elif edge_state is EdgeState.PENDING and edge.handle == SUCCESS_HANDLE:
                # A success edge of a node sure to run is taken when that node succeeds;
                # an if-else's case edges are not success edges, so they wait for its choice.
                if self._will_run(edge.source, memo):
                    result = True
            if result:
                break
        memo[node_id] = result
        return result
