"""From an API request to a started run, wherever the run executes.

A `RunRequest` is what the API accepted for one run, in plain JSON values (so
it can be queued for a worker process as it is); `Launcher.open` turns it into
a started `WorkflowRun` in the process that executes it (the API process
in-process, a Celery worker with `--broker`), and `Launcher.check` runs the
same input and file checks without starting anything (the API process checks
before it queues, so bad input is a 400 in both modes). Every failure to start
is one of Dify's errors (`ApiError`), mapped here once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from firstgate.locales.localized_error import LocalizedError
from firstgate.nodes.start import InputError
from firstgate.runtime import human_input
from firstgate.runtime.execution.checkpoint import (
    DEFAULT_BATCH_MS,
    CheckpointError,
    Durability,
    Resolved,
)
from firstgate.runtime.execution.engine import WorkflowRun
from firstgate.runtime.execution.environment import EnvVarError
from firstgate.runtime.execution.limits import RunLimits
from firstgate.runtime.execution.resources import RunResources
from firstgate.runtime.execution.session import RunOptions
from firstgate.runtime.models.routes import RouteError
from firstgate.serve import uploads
from firstgate.serve.apps import App
from firstgate.serve.errors import ApiError, invalid_param, not_found
from firstgate.serve.file_links import FileLinks
from firstgate.store.base import TRIGGERED_APP_RUN, FormRecord, Store, StoreError


def _new_id() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One accepted run request; the ids are chosen when it is accepted."""

    app_stem: str
    inputs: dict[str, Any]
    user: str
    files: list[dict[str, Any]] | None = None
    query: str | None = None
    conversation_id: str | None = None
    base_url: str = ""
    # The trigger node the run starts at (a webhook's, a schedule's); None: the start node.
    root: str | None = None
    # How it was started (`store.base`'s TRIGGERED_*): what its record and log say.
    triggered_from: str = TRIGGERED_APP_RUN
    task_id: str = field(default_factory=_new_id)
    workflow_run_id: str = field(default_factory=_new_id)
    traceparent: str | None = None  # the caller's W3C trace context

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Launcher:
    """What starting a run takes in one process: the run resources (with the
    process's store), opened once per process and closed by `close()`."""

    resources: RunResources
    links: FileLinks
    limits: RunLimits | None = None  # None: the engine's defaults
    durability: Durability = Durability.BATCHED
    durability_ms: int = DEFAULT_BATCH_MS

    @property
    def store(self) -> Store:
        store = self.resources.store
        assert store is not None  # serve always opens one (`open_resources`)
        return store

    def close(self) -> None:
        self.resources.close()
        self.store.close()

    def _resolve(self, app: App, request: RunRequest) -> tuple[dict[str, Any], list[Any]]:
        def link(upload_id: str) -> str:
            return self.links.link(request.base_url, upload_id)

        inputs = uploads.resolve_inputs(request.inputs, app, self.store, link)
        if request.root is not None:
            inputs = uploads.resolve_webhook_files(inputs, app, request.root, self.store, link)
        files = uploads.resolve_files(request.files, app, self.store, link)
        return inputs, files

    def check(self, app: App, request: RunRequest) -> None:
        """The request's inputs and files, checked as `open` checks them (ApiError)."""
        inputs, _ = self._resolve(app, request)
        with start_errors():
            app.workflow.prepare_inputs(inputs, request.query, request.root)

    def open(self, app: App, request: RunRequest) -> WorkflowRun:
        """Start the run (ApiError when it cannot start)."""
        inputs, files = self._resolve(app, request)
        with start_errors():
            options = RunOptions(
                query=request.query,
                conversation_id=request.conversation_id,
                user_id=request.user,
                files=files,
                limits=self.limits or RunLimits(),
                run_id=request.workflow_run_id,
                task_id=request.task_id,
                root=request.root,
                durability=self.durability,
                durability_batch_ms=self.durability_ms,
                triggered_from=request.triggered_from,
                traceparent=request.traceparent,
            )
            return app.workflow.run(inputs, options, self.resources)

    def resume(
        self,
        app: App,
        run_id: str,
        *,
        resolved: Mapping[str, Resolved] | None = None,
        take_over: bool = False,
    ) -> WorkflowRun:
        """Go on with run `run_id` from its checkpoint (ApiError when it cannot:
        no checkpoint, a changed app, held elsewhere). `take_over`: the caller holds
        the run by other means (a broker's lease), whoever the store says holds it."""
        with start_errors():
            options = RunOptions(
                limits=self.limits or RunLimits(),
                durability=self.durability,
                durability_batch_ms=self.durability_ms,
            )
            return app.workflow.resume(
                run_id, options, self.resources, resolved=resolved, take_over=take_over
            )

    def has_checkpoint(self, run_id: str) -> bool:
        return self.store.checkpoint(run_id, whole=False) is not None

    def resume_form(self, app: App, form: FormRecord) -> WorkflowRun:
        """The paused run of a closed human-input form, resumed here with the
        node's outputs and branch (ApiError when it cannot be)."""
        return self.resume(app, form.workflow_run_id, resolved=human_input.resolved_for(form))


@contextmanager
def start_errors() -> Iterator[None]:
    """Why a run could not start, as Dify's error."""
    try:
        yield
    except LocalizedError as exc:
        raise _api_error(exc) from None


def _api_error(exc: LocalizedError) -> ApiError:
    if isinstance(exc, InputError):
        return invalid_param("serve.error.input", error=exc.render())
    if isinstance(exc, RouteError):
        return ApiError(400, "provider_not_initialize", "serve.error.provider", error=exc.render())
    if isinstance(exc, EnvVarError):
        return ApiError(400, "app_unavailable", "serve.error.app", error=exc.render())
    if isinstance(exc, CheckpointError):
        return ApiError(400, "invalid_param", exc.message_key, **exc.params)
    if isinstance(exc, StoreError):
        if exc.message_key == "errors.store.foreignConversation":
            return not_found("serve.error.noConversation")
        return ApiError(400, "conversation_busy", "serve.error.store", error=exc.render())
    return invalid_param("serve.error.input", error=exc.render())
