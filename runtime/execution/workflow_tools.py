"""Workflow tools (Dify's `workflow` provider type): another workflow, named in
the runtime settings (`tools.workflow_providers: {ID: {file: FLOW.yml}}`),
run as a tool with the tool's arguments as its start inputs.

The inner run runs on the outer run's resources (model routes, code executor,
settings, loader: `runtime.resources.RunResources`, passed on, never closed
here); it has the tool's time bound as its run time limit, stops when the
outer run stops, is not recorded on its own (it is part of the outer run's
record) and has no conversation of its own (a chatflow cannot be a tool). Workflows calling workflows nest at most `MAX_DEPTH` deep (Dify's
`WORKFLOW_CALL_MAX_DEPTH`). Its outputs come back as Dify's workflow tool
gives them: the file outputs as files, the rest as one JSON object, also as
its text.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from firstgate.common.cancel import Cancellable
from firstgate.connectors.tool_messages import ToolCancelledError, ToolError, ToolTimeoutError
from firstgate.runtime.execution import events as ev
from firstgate.runtime.execution.limits import RunLimits
from firstgate.runtime.execution.session import RunOptions

if TYPE_CHECKING:
    from firstgate.runtime.settings import RuntimeSettings


class InnerRun(Protocol):
    outputs: Mapping[str, Any]

    def __iter__(self) -> Iterator[ev.Event]: ...

    def abort(self) -> None: ...


class ToolWorkflow(Protocol):
    """What a workflow tool needs of a loaded workflow (runtime.workflow.Workflow)."""

    @property
    def chat(self) -> bool: ...

    def run(self, inputs: Mapping[str, Any], options: RunOptions, resources: Any) -> InnerRun: ...


# Loads a workflow file with the runtime settings (runtime.workflow.load_workflow,
# carried by the run's resources so that this module does not import it back).
Loader = Callable[..., ToolWorkflow]


class OuterResources(Protocol):
    """What a workflow tool reads of its outer run's resources
    (runtime.resources.RunResources), which it passes on whole to the inner run."""

    @property
    def settings(self) -> RuntimeSettings | None: ...


MAX_DEPTH = 5
# How deep the workflow being run is in workflow-tool calls (0: the outer run).
_DEPTH: ContextVar[int] = ContextVar("firstgate_workflow_tool_depth", default=0)


class WorkflowTools:
    """Runs the workflow tools of one outer run (it is on that run's connectors)."""

    def __init__(self, resources: OuterResources, load: Loader) -> None:
        self.resources = resources
        self.load = load
        self.settings = resources.settings
        self._loaded: dict[str, ToolWorkflow] = {}
        self._lock = threading.Lock()

    def _workflow(self, provider_id: str) -> ToolWorkflow:
        spec = self.settings.tools.workflow_providers.get(provider_id) if self.settings else None
        if spec is None:
            raise ToolError("errors.tool.unknownWorkflowProvider", provider=provider_id)
        with self._lock:
            found = self._loaded.get(spec.file)
        if found is None:
            found = self.load(Path(spec.file), settings=self.settings)
            if found.chat:
                raise ToolError("errors.tool.chatflowTool", provider=provider_id, file=spec.file)
            with self._lock:
                self._loaded[spec.file] = found
        return found

    def run(
        self,
        provider_id: str,
        inputs: Mapping[str, Any],
        *,
        timeout_s: float,
        cancel: Cancellable | None = None,
    ) -> dict[str, Any]:
        """The inner workflow's outputs; a failure is a ToolError naming it."""
        depth = _DEPTH.get() + 1
        if depth > MAX_DEPTH:
            raise ToolError("errors.tool.workflowDepth", provider=provider_id, limit=MAX_DEPTH)
        workflow = self._workflow(provider_id)
        token = _DEPTH.set(depth)  # copied into the inner run's workers with their context
        try:
            options = RunOptions(limits=RunLimits(max_run_seconds=timeout_s), recorded=False)
            inner = workflow.run(dict(inputs), options, self.resources)
            attach = (
                cancel.attached(inner.abort) if cancel is not None else contextlib.nullcontext()
            )
            with attach:
                final: ev.Event | None = None
                for event in inner:
                    final = event
        except ToolError:
            raise
        except Exception as exc:  # noqa: BLE001 - inputs that do not fit, routes, ...
            raise ToolError(
                "errors.tool.workflowFailed", provider=provider_id, detail=str(exc)
            ) from None
        finally:
            _DEPTH.reset(token)
        # The run's own values (file objects), not the event's serialized copy.
        return _outputs(final, inner.outputs, provider_id, timeout_s, cancel)


def _outputs(
    final: ev.Event | None,
    values: Mapping[str, Any],
    provider_id: str,
    timeout_s: float,
    cancel: Cancellable | None,
) -> dict[str, Any]:
    if isinstance(final, ev.WorkflowSucceeded | ev.WorkflowPartialSucceeded):
        return dict(values)
    if isinstance(final, ev.WorkflowStopped) and getattr(cancel, "cancelled", False):
        raise ToolCancelledError()
    if isinstance(final, ev.WorkflowFinished) and final.error_type == "LimitExceededError":
        raise ToolTimeoutError(seconds=f"{timeout_s:g}")
    detail = getattr(final, "error_message", None) or "the workflow did not finish"
    raise ToolError("errors.tool.workflowFailed", provider=provider_id, detail=detail)
