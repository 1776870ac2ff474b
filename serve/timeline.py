"""A run's timeline: when each of its events happened, kept for the console.

While a run is drained (`serve/runs.py:drain_run`, in-process and on a
worker alike) a `TimelineRecorder` notes every event that says something
about the run's shape (node starts and ends, first tokens, waits, retries,
fallbacks, container rounds, the run's end) with `t`, the seconds since the
run's first event. The text a run streams is left out (it is in the answer
and the node outputs), and so are a node execution's inputs, outputs and
process data (the store's node executions hold them) and the run's outputs
(its record holds them). The events were
redacted by the run's report before they got here; nothing is added.

`replay` gives the console the events of a recorded run, the kept timeline
merged with its node executions, or, for a run recorded without one (the
CLI's), events rebuilt from the node executions alone (their times are
whole seconds there).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from firstgate.common.storable_text import mend
from firstgate.store.base import NodeExecutionRecord, RunRecord, Store

log = logging.getLogger("firstgate.serve")

# What a timeline may hold: a run of thousands of rounds keeps its first events
# and its end; a long error message keeps its start.
MAX_EVENTS = 5000
MAX_TEXT = 2000
# The events of text the run streams: in the answer, never in the timeline.
_TEXT_EVENTS = frozenset({"text_chunk", "message", "agent_message", "agent_log", "tts_message"})
# Kept in the node executions (merged back by execution id when replayed) and
# in the run's record: never twice.
_LEFT_OUT = {
    "node_finished": ("inputs", "outputs", "process_data"),
    "workflow_finished": ("outputs",),
}
# Always kept, even past MAX_EVENTS: how the run and its nodes ended.
_ENDS = frozenset({"node_finished", "workflow_finished", "message_end", "error"})


def _cut(value: Any) -> Any:
    """`value` as the store can keep it: every string mended (a lone surrogate a
    run made, a NUL a server sent) and at most MAX_TEXT characters long."""
    if isinstance(value, str):
        value = mend(value)
        return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + "…"
    if isinstance(value, dict):
        return {mend(str(k)): _cut(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v) for v in value]
    return value


class TimelineRecorder:
    """The timeline of one run, noted as its events are published."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        prior: list[dict[str, Any]] | None = None,
    ) -> None:
        """`prior`: what was kept of the run before (a run resumed after a pause):
        its events come first and the new ones' times go on from its last."""
        self._clock = clock
        self._t0: float | None = None
        self.events: list[dict[str, Any]] = list(prior or [])
        self._offset = float(self.events[-1].get("t") or 0.0) if self.events else 0.0
        self.dropped = 0

    def see(self, wire: Mapping[str, Any]) -> None:
        """Note one published event (its wire form)."""
        name = str(wire.get("event", ""))
        now = self._clock()
        if self._t0 is None:
            self._t0 = now
        if name in _TEXT_EVENTS:
            return
        if len(self.events) >= MAX_EVENTS and name not in _ENDS:
            self.dropped += 1
            return
        data = wire.get("data")
        kept: dict[str, Any] = {k: v for k, v in wire.items() if k != "data"}
        if isinstance(data, dict):
            left_out = _LEFT_OUT.get(name, ())
            kept["data"] = {k: v for k, v in data.items() if k not in left_out}
        kept["t"] = round(self._offset + now - self._t0, 4)
        self.events.append(_cut(kept))

    def save(self, store: Store, run_id: str) -> None:
        """Keep the timeline with the run's record; a run the store did not record
        (its record refused) keeps none, and the run is not the worse for it."""
        try:
            store.record_timeline(run_id, self.events)
        except Exception as exc:  # noqa: BLE001 - a timeline is never worth a run
            log.warning("the timeline of run %s was not kept: %s", run_id, type(exc).__name__)


def replay(store: Store, record: RunRecord) -> list[dict[str, Any]]:
    """The events of a recorded run, in order, each with its time `t`."""
    kept = store.timeline(record.id)
    nodes = {node.id: node for node in record.nodes}
    if kept is None:
        return _rebuilt(record)
    for event in kept:
        data = event.get("data")
        if not isinstance(data, dict):
            continue
        node = nodes.get(str(data.get("id", "")))
        if event.get("event") == "node_finished" and node is not None:
            data.update(
                inputs=dict(node.inputs),
                outputs=dict(node.outputs),
                process_data=dict(node.process_data),
            )
        elif event.get("event") == "workflow_finished":
            data["outputs"] = dict(record.outputs)
    return kept


_CONTAINER_END = 1 << 29  # a sort key past every node's (indexes are far smaller)


def _rebuilt(record: RunRecord) -> list[dict[str, Any]]:
    """Events made of the node executions alone, for a run kept without a timeline."""
    containers = {
        str(node.execution_metadata.get(f"{kind}_id")): kind
        for node in record.nodes
        for kind in ("iteration", "loop")
        if node.execution_metadata.get(f"{kind}_id")
    }
    events: list[tuple[float, int, dict[str, Any]]] = [
        (0.0, 0, {"event": "workflow_started", "data": {"id": record.id, "inputs": record.inputs}})
    ]
    for node in record.nodes:
        end = max(0.0, node.finished_at - record.created_at)
        start = max(0.0, end - node.elapsed_time)
        kind = containers.get(node.node_id)
        began, ended = _node_pair(node, kind)
        # Whole seconds often tie: a container's end goes after its rounds' nodes.
        last = _CONTAINER_END + node.index if kind is not None else node.index * 2 + 1
        events.append((start, node.index * 2, {**began, "t": start}))
        events.append((end, last, {**ended, "t": end}))
    finished = {
        "event": "workflow_finished",
        "t": record.elapsed_time,
        "data": {
            "id": record.id,
            "status": record.status,
            "outputs": dict(record.outputs),
            "error": record.error,
            "elapsed_time": record.elapsed_time,
            "total_tokens": record.total_tokens,
            "total_steps": record.total_steps,
            "exceptions_count": record.exceptions_count,
        },
    }
    events.append((record.elapsed_time, 2 * _CONTAINER_END, finished))
    events.sort(key=lambda item: (item[0], item[1]))
    out = [event for _, _, event in events]
    out[0]["t"] = 0.0
    return out


def _node_pair(
    node: NodeExecutionRecord, container_kind: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A node execution's start and end events (a container's, by its kind)."""
    meta = dict(node.execution_metadata)
    head = {"node_id": node.node_id, "node_type": node.node_type, "title": node.title}
    place = {f"{kind}_id": meta.get(f"{kind}_id") for kind in ("iteration", "loop")}
    body = {
        "inputs": dict(node.inputs),
        "outputs": dict(node.outputs),
        "process_data": dict(node.process_data),
        "status": node.status,
        "error": node.error,
        "elapsed_time": node.elapsed_time,
        "execution_metadata": meta,
    }
    if container_kind is not None:
        head = {**head, "id": node.node_id}
        return (
            {"event": f"{container_kind}_started", "data": head},
            {"event": f"{container_kind}_completed", "data": {**head, **body}},
        )
    head = {**head, "id": node.id, "index": node.index, **place}
    return (
        {"event": "node_started", "data": head},
        {"event": "node_finished", "data": {**head, **body}},
    )
