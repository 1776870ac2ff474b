"""Streams the response nodes (answers, ends) in Dify's order while the run goes.

Each response node has a template: its literal text and the variables it
shows (an end node shows its outputs, one per line). Dify's rules, which its
graph-engine tests pin down, and which this module reproduces:

- A response node's stream opens once there is a way to it from the start node
  on which every *blocking* edge has been taken. An edge blocks when its source
  decides something the response depends on: a branch (which way), a container,
  another response node (so responses keep their order), or a node that writes
  a variable the template shows (an assigner writing `conversation.x`).
- One stream is open at a time, the others wait in the order they opened; a
  stream goes through its template in order: literal text at once, a variable
  when its node has finished, a streamed output (LLM text) chunk by chunk, and
  a chunk that arrives before its turn is held until what comes before it is out.
- A variable of a node that will not run (skipped) is left out.

One edge blocks here that does not in Dify: a fail-branch edge (taken only
when its node fails). Dify lets an answer behind it stream its text before
the node has even failed, then waits for ever when the node succeeds.

Three cases Dify leaves stuck are closed here: a variable whose node finished
without it (an LLM that failed into its fail branch) is left out instead of
waited for, so is one of a node nothing connects to the start; and a stream
whose response node will not run is dropped at once (none of its text goes
out after that, and the next stream takes over).

What one response node streams stops at the rendering cap
(`common.rendering.MAX_RENDERED_CHARS`): the rest is not sent, and the node's
own render then fails with the cap's error.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from firstgate.common.rendering import MAX_RENDERED_CHARS
from firstgate.nodes.base import FAIL_HANDLE, Role
from firstgate.nodes.selectors import Segment, Selector, TextSegment, VariableSegment
from firstgate.nodes.values import as_markdown
from firstgate.runtime.dsl.graph import EdgeDef, Graph
from firstgate.runtime.execution.scheduler import NodeState
from firstgate.runtime.execution.variable_pool import VariablePool

_BLOCKING_ROLES = frozenset({Role.BRANCH, Role.CONTAINER, Role.RESPONSE})


@dataclass(frozen=True, slots=True)
class Piece:
    """Text of response node `response_id`. `selector` is where it comes from
    (Dify's `from_variable_selector`: the variable, or [response, "answer"] for
    literal text); `source`/`attempt` name the node attempt that streamed it."""

    response_id: str
    text: str
    selector: Selector
    source: str | None = None
    attempt: int | None = None


@dataclass(slots=True)
class _Session:
    node_id: str
    segments: list[Segment]
    index: int = 0


@dataclass(slots=True)
class _Stream:
    """A streamed output's chunks: held until read, closed when its node ends."""

    chunks: list[tuple[int, str]] = field(default_factory=list)
    read: int = 0
    closed: bool = False


class StreamPlan:
    """What streaming a graph needs to know of it, worked out once per graph
    (a container's graph streams once per round, with a fresh `ResponseStreamer`)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.templates: dict[str, list[Segment]] = {}
        self.blocking: dict[str, frozenset[int]] = {}
        for node in graph.nodes.values():
            if node.spec.role is Role.RESPONSE and node.spec.template is not None:
                segments = node.spec.template(node.data)
                self.templates[node.id] = segments
                self.blocking[node.id] = self._blocking_edges(segments)
        self.streamed_outputs = {
            node.id: sorted(node.needs.streams)
            for node in graph.nodes.values()
            if node.needs.streams
        }
        self.referenced = {
            segment.selector
            for segments in self.templates.values()
            for segment in segments
            if isinstance(segment, VariableSegment)
        }

    def _blocking_edges(self, segments: list[Segment]) -> frozenset[int]:
        shown = {
            tuple(segment.selector[:2])
            for segment in segments
            if isinstance(segment, VariableSegment)
        }
        blocking: set[int] = set()
        for index, edge in enumerate(self.graph.edges):
            source = self.graph.nodes[edge.source]
            # A fail-branch edge is a decision too: taken only if the node fails.
            failure_only = edge.handle == FAIL_HANDLE
            if source.spec.role in _BLOCKING_ROLES or shown & source.needs.writes or failure_only:
                blocking.add(index)
        return frozenset(blocking)


class ResponseStreamer:
    def __init__(
        self, plan: StreamPlan, pool: VariablePool, state: Callable[[str], NodeState]
    ) -> None:
        self.plan = plan
        self.graph = plan.graph
        self.pool = pool
        self.state = state
        self._edge_ids = self.graph.edge_index
        self._taken: set[int] = set()
        self._pending = {
            node_id: _Session(node_id, segments) for node_id, segments in plan.templates.items()
        }
        self._blocking = plan.blocking
        self._reached: dict[str, set[str]] = {node_id: set() for node_id in plan.templates}
        self._streamed_outputs = plan.streamed_outputs
        self._streams: dict[Selector, _Stream] = {
            (node_id, output): _Stream()
            for node_id, outputs in self._streamed_outputs.items()
            for output in outputs
            if (node_id, output) in plan.referenced
        }
        self._active: _Session | None = None
        self._waiting: deque[_Session] = deque()
        self._sent: dict[str, int] = {}  # response node -> characters streamed

    # ---- checkpoints

    def saved(self) -> dict[str, Any]:
        """Where each stream is (what `restore` takes back): the streams opened,
        waiting or not yet opened, and how far each streamed output was read.
        The edges taken and what they reach are the scheduler's to say."""
        return {
            "pending": list(self._pending),
            "active": None if self._active is None else [self._active.node_id, self._active.index],
            "waiting": [[s.node_id, s.index] for s in self._waiting],
            "streams": [
                [list(selector), stream.chunks, stream.read, stream.closed]
                for selector, stream in self._streams.items()
                if stream.chunks or stream.closed
            ],
            "sent": dict(self._sent),
        }

    def restore(self, state: Mapping[str, Any], taken: Iterable[int], started: bool) -> None:
        """The streams as `saved()` gave them; `taken`: the positions of the edges
        taken; `started`: whether the start node has finished."""
        templates = self.plan.templates

        def session(entry: Sequence[Any]) -> _Session:
            node_id, index = str(entry[0]), int(entry[1])
            return _Session(node_id, templates[node_id], index)

        self._taken = set(taken)
        self._pending = {n: _Session(n, templates[n]) for n in state["pending"]}
        self._active = None if state["active"] is None else session(state["active"])
        self._waiting = deque(session(e) for e in state["waiting"])
        for selector, chunks, read, closed in state["streams"]:
            stream = self._streams.get(tuple(selector))
            if stream is not None:
                stream.chunks = [(int(a), str(t)) for a, t in chunks]
                stream.read, stream.closed = int(read), bool(closed)
        self._sent = {str(k): int(v) for k, v in state["sent"].items()}
        # What each waiting response reaches: all that open ways lead to from the
        # start (what the streamer worked out edge by edge, done again at once).
        self._reached = {response_id: set() for response_id in templates}
        if started:
            for response_id in self._pending:
                self._reach(response_id, self.graph.start_id)

    # ---- which streams may open

    def _open_way(self, response_id: str, edge: EdgeDef) -> bool:
        index = self._edge_ids[id(edge)]
        return index in self._taken or index not in self._blocking[response_id]

    def _reach(self, response_id: str, start: str) -> bool:
        """Extend what is reached from `start`; True when the response node is reached."""
        reached = self._reached[response_id]
        stack = [start]
        while stack:
            node_id = stack.pop()
            if node_id in reached:
                continue
            reached.add(node_id)
            for edge in self.graph.out_edges(node_id):
                if edge.target not in reached and self._open_way(response_id, edge):
                    stack.append(edge.target)
        return response_id in reached

    # ---- what the engine tells us

    def on_node_done(
        self, node_id: str, taken: Iterable[EdgeDef], skipped: Iterable[str]
    ) -> list[Piece]:
        """A node finished (its outputs are in the pool): its edges, the nodes
        that will now never run, then whatever that lets through."""
        for selector in self._selectors_of(node_id):
            self._streams[selector].closed = True
        pieces: list[Piece] = []
        if node_id == self.graph.start_id:
            for response_id in sorted(self._pending):
                if self._reach(response_id, node_id):
                    pieces.extend(self._open(response_id))
        for edge in taken:
            self._taken.add(self._edge_ids[id(edge)])
            for response_id in sorted(self._pending):
                if edge.source in self._reached[response_id] and self._reach(
                    response_id, edge.target
                ):
                    pieces.extend(self._open(response_id))
        for skipped_id in skipped:
            pieces.extend(self._drop(skipped_id))
        pieces.extend(self.flush())
        return self._capped(pieces)

    def on_chunk(self, source: str, attempt: int, text: str) -> list[Piece]:
        streams = [self._streams[s] for s in self._selectors_of(source)]
        if not streams:
            return []  # no template shows it: Dify drops such chunks
        for stream in streams:
            stream.chunks.append((attempt, text))
        return self._capped(self.flush())

    def on_retry(self, source: str) -> None:
        """The attempt failed: its chunks not yet shown never will be."""
        for selector in self._selectors_of(source):
            stream = self._streams[selector]
            del stream.chunks[stream.read :]

    def _capped(self, pieces: list[Piece]) -> list[Piece]:
        kept: list[Piece] = []
        for piece in pieces:
            room = MAX_RENDERED_CHARS - self._sent.get(piece.response_id, 0)
            if room <= 0:
                continue
            if len(piece.text) > room:
                piece = replace(piece, text=piece.text[:room])
            self._sent[piece.response_id] = self._sent.get(piece.response_id, 0) + len(piece.text)
            kept.append(piece)
        return kept

    def _selectors_of(self, node_id: str) -> list[Selector]:
        return [
            (node_id, output)
            for output in self._streamed_outputs.get(node_id, ())
            if (node_id, output) in self._streams
        ]

    # ---- sessions

    def _open(self, response_id: str) -> list[Piece]:
        session = self._pending.pop(response_id, None)
        if session is None:
            return []
        if self._active is None:
            self._active = session
            return self.flush()
        self._waiting.append(session)
        return []

    def _drop(self, response_id: str) -> list[Piece]:
        self._pending.pop(response_id, None)
        self._waiting = deque(s for s in self._waiting if s.node_id != response_id)
        if self._active is not None and self._active.node_id == response_id:
            return self._next()
        return []

    def _next(self) -> list[Piece]:
        self._active = self._waiting.popleft() if self._waiting else None
        return self.flush() if self._active is not None else []

    def flush(self) -> list[Piece]:
        pieces: list[Piece] = []
        while self._active is not None:
            session = self._active
            while session.index < len(session.segments):
                segment = session.segments[session.index]
                if isinstance(segment, TextSegment):
                    if segment.text:
                        pieces.append(
                            Piece(session.node_id, segment.text, (session.node_id, "answer"))
                        )
                elif not self._variable(session, segment, pieces):
                    return pieces
                session.index += 1
            self._active = self._waiting.popleft() if self._waiting else None
        return pieces

    def _variable(self, session: _Session, segment: VariableSegment, out: list[Piece]) -> bool:
        """Emit what is available of one variable; True when it is complete."""
        selector = segment.selector
        head = selector[0]
        stream = self._streams.get(selector)
        if stream is not None and (stream.chunks or not stream.closed):
            for attempt, text in stream.chunks[stream.read :]:
                out.append(Piece(session.node_id, text, selector, head, attempt))
            stream.read = len(stream.chunks)
            return stream.closed or self.state(head) is NodeState.SKIPPED
        # Not streamed (or its node ended without streaming): the finished value.
        if head in self.graph.nodes:
            state = self.state(head)
            if state is NodeState.SKIPPED or head not in self.graph.reachable:
                return True  # it will not run: leave it out
            if state is not NodeState.DONE:
                return False
        text = as_markdown(self.pool.get(selector))
        if text:
            out.append(
                Piece(session.node_id, text, selector, head if head in self.graph.nodes else None)
            )
        return True
