"""Helpers for reading a run's events in tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from firstgate.runtime.execution import events as ev


def final(events: Sequence[ev.Event]) -> ev.WorkflowFinished:
    """The run's end: its `workflow_finished` (a chat turn goes on with
    `message_end` or `error` after it)."""
    return next(e for e in reversed(events) if isinstance(e, ev.WorkflowFinished))


def finished_line(lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The `workflow_finished` line of `--json` output."""
    return next(line for line in reversed(lines) if line["event"] == "workflow_finished")
