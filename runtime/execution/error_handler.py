"""One node execution under Dify's error semantics: retry first, then the
node's error strategy (none -> fail, fail-branch, default-value)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from firstgate.common.cancel import CancelToken
from firstgate.common.telemetry import activated
from firstgate.nodes.base import FAIL_HANDLE, NeedsWorker, NodeContext, NodeResult, Pause
from firstgate.nodes.selectors import Selector
from firstgate.runtime.dsl.graph import NodeDef


class Status(Enum):
    SUCCEEDED = "succeeded"
    EXCEPTION = "exception"  # failed, handled by the error strategy
    FAILED = "failed"  # failed, no strategy: the workflow fails
    CANCELLED = "cancelled"  # the run was aborted while the node ran
    PAUSED = "paused"  # the node paused the run (`NodeResult.pause`): not finished


@dataclass(slots=True)
class Outcome:
    status: Status
    attempt: int
    outputs: dict[str, Any] = field(default_factory=dict)
    handles: frozenset[str] | None = None
    error: BaseException | None = None
    strategy: str | None = None
    process_data: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    usage: Mapping[str, Any] | None = None
    updates: Mapping[Selector, Any] = field(default_factory=dict)
    breaks: bool = False  # ends the enclosing loop (NodeResult.breaks)
    retriever_resources: tuple[Mapping[str, Any], ...] = ()
    pause: Pause | None = None  # Status.PAUSED: what the node paused with


def error_type(exc: BaseException) -> str:
    return type(exc).__name__


def error_outputs(exc: BaseException) -> dict[str, Any]:
    return {"error_message": str(exc), "error_type": error_type(exc)}


def apply_strategy(node: NodeDef, exc: BaseException, attempt: int) -> Outcome:
    strategy = node.data.error_strategy
    if strategy == "fail-branch":
        return Outcome(
            Status.EXCEPTION, attempt, error_outputs(exc), frozenset({FAIL_HANDLE}), exc, strategy
        )
    if strategy == "default-value":
        outputs = {d.key: d.value for d in node.data.default_value} | error_outputs(exc)
        choose = node.spec.default_handles
        handles = choose(node.data, outputs) if choose is not None else None
        return Outcome(Status.EXCEPTION, attempt, outputs, handles, exc, strategy)
    return Outcome(Status.FAILED, attempt, {}, None, exc)


OnRetry = Callable[[int, Exception, int], None]  # (failed attempt, error, interval ms)


def execute(
    node: NodeDef,
    make_context: Callable[[int], NodeContext],
    cancel: CancelToken,
    on_retry: OnRetry,
) -> Outcome:
    """Run the node until it succeeds, its retries are spent, or the run is cancelled.

    Each attempt runs in its own copied context, so the transport's gate
    ContextVar set by one attempt is never seen by the next.
    """
    interval_ms = node.data.retry_config.retry_interval
    attempt = 1
    while True:
        if cancel.cancelled:
            return Outcome(Status.CANCELLED, attempt, error=None)
        ctx = make_context(attempt)
        try:
            result = contextvars.copy_context().run(_run_attempt, node, ctx)
        except NeedsWorker:
            raise  # not a failure: the engine runs the node again on a worker
        except Exception as exc:
            if cancel.cancelled:
                # The abort caused this error: no retry, no strategy.
                return Outcome(Status.CANCELLED, attempt, error=exc)
            if attempt <= node.retries:
                on_retry(attempt, exc, interval_ms)
                if cancel.sleep(interval_ms / 1000.0):
                    return Outcome(Status.CANCELLED, attempt, error=exc)
                attempt += 1
                continue
            return apply_strategy(node, exc, attempt)
        return succeeded(result, attempt)


def _run_attempt(node: NodeDef, ctx: NodeContext) -> NodeResult:
    """One attempt, its node's span current (what it calls traces under it)."""
    if ctx.trace is None:
        return node.spec.run(node.data, ctx)
    with activated(ctx.trace):
        return node.spec.run(node.data, ctx)


def succeeded(result: NodeResult, attempt: int) -> Outcome:
    if result.pause is not None:
        return Outcome(Status.PAUSED, attempt, pause=result.pause)
    return Outcome(
        Status.SUCCEEDED,
        attempt,
        dict(result.outputs),
        result.handles,
        process_data=dict(result.process_data or {}),
        inputs=dict(result.inputs or {}),
        usage=result.usage,
        updates=dict(result.updates),
        breaks=result.breaks,
        retriever_resources=result.retriever_resources,
    )
