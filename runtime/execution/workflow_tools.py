"""Workflow tools (Dify's `workflow` provider type): another workflow, named in
the runtime settings (`tools.workflow_providers: {ID: {file: FLOW.yml}}`),
run as a tool with the tool's arguments as its start inputs.

The inner run shares the outer run's model routes, code executor and
settings; it has the tool's time bound as its run time limit, stops when the
outer run stops, and has no conversation of its own (a chatflow cannot be a
tool). Workflows calling workflows nest at most `MAX_DEPTH` deep (Dify's
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
from firstgate.runtime.models.route_clients import RouteClients, SharedClients

if TYPE_CHECKING:
    from firstgate.nodes.base import Clients
    from firstgate.runtime.settings import RuntimeSettings
    from firstgate.sandbox.executor import CodeExecutor


class InnerRun(Protocol):
    outputs: Mapping[str, Any]

    def __iter__(self) -> Iterator[ev.Event]: ...

    def abort(self) -> None: ...


class ToolWorkflow(Protocol):
    """What a workflow tool needs of a loaded workflow (runtime.workflow.Workflow)."""

    @property
    def chat(self) -> bool: ...

    def llm_providers(self) -> set[str]: ...

    def run(self, inputs: Mapping[str, Any], **options: Any) -> InnerRun: ...


# Loads a workflow file with the runtime settings (runtime.loader.load_workflow,
# handed down by the loader so that this module does not import it back).
Loader = Callable[..., ToolWorkflow]

MAX_DEPTH = 5
# How deep the workflow being run is in workflow-tool calls (0: the outer run).
_DEPTH: ContextVar[int] = ContextVar("firstgate_workflow_tool_depth", default=0)


class WorkflowTools:
    """Runs the workflow tools of one outer run (it is on that run's connectors)."""

    def __init__(
        self,
        settings: RuntimeSettings | None,
        clients: Clients | None,
        code_executor: CodeExecutor | None,
        load: Loader,
    ) -> None:
        self.load = load
        self.settings = settings
        self.clients = clients
        self.code_executor = code_executor
        self._loaded: dict[str, ToolWorkflow] = {}
        self._lock = threading.Lock()

    def _workflow(self, provider_id: str) -> ToolWorkflow:
        tools = getattr(self.settings, "tools", None)
        spec = (getattr(tools, "workflow_providers", None) or {}).get(provider_id)
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
            inner = workflow.run(
                dict(inputs),
                settings=self.settings,
                clients=self._lend_clients(workflow),
                code_executor=self.code_executor,
                limits=RunLimits(max_run_seconds=timeout_s),
            )
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

    def _lend_clients(self, workflow: ToolWorkflow) -> Any:
        """The outer run's model routes for the inner run, which must not close
        them (the outer run calls models after the tool too); the routes the
        inner workflow adds are checked, and the embedded server started if it
        needs it, as its own run would."""
        if not isinstance(self.clients, RouteClients):
            return self.clients  # an embedder's own clients, or none: the run builds routes
        providers = workflow.llm_providers()
        self.clients.routes.check(providers)
        if self.clients.needs_local(providers):
            self.clients.start_local()
        return SharedClients(self.clients)


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
