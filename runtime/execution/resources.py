"""What runs use and someone must close: the model routes' clients (and the
embedded llama-server), the code executor, the store, the loader that loads
the workflows a workflow tool names, and the factory of each run's connectors.

One owner: whoever opens a `RunResources` closes it. The CLI opens one per
run, serve and the distributed worker one per process, `Workflow.run` one for
the single run it starts when it is given none; a workflow tool passes its
outer run's on to the inner run. A run closes only what it made (its
connectors, its worker threads), never these. `close()` closes what `open`
opened (the route clients and the server they started, the code executor it
built); the parts it was handed (a store, your own clients or executor) stay
the caller's to close.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

from firstgate.common.telemetry import install
from firstgate.connectors.hub import Connectors
from firstgate.runtime.execution.code_executors import build_code_executor
from firstgate.runtime.execution.workflow_tools import Loader, WorkflowTools
from firstgate.runtime.models.route_clients import RouteClients
from firstgate.runtime.models.routes import ModelRoutes

if TYPE_CHECKING:
    from firstgate.nodes.base import Clients
    from firstgate.runtime.settings import RuntimeSettings
    from firstgate.sandbox.executor import CodeExecutor
    from firstgate.store.base import Store


@dataclass(eq=False, slots=True)
class RunResources:
    """Open with `RunResources.open(settings, ...)`; use as a context manager or `close()`."""

    settings: RuntimeSettings | None
    clients: Clients
    store: Store | None
    loader: Loader | None
    # The routes opened here (None when the caller brought its own clients):
    # each run checks the credentials it needs and starts the server it needs.
    routes: RouteClients | None
    _code_executor: CodeExecutor | None
    _opened: ExitStack
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(
        cls,
        settings: RuntimeSettings | None = None,
        *,
        store: Store | None = None,
        clients: Clients | None = None,
        code_executor: CodeExecutor | None = None,
        loader: Loader | None = None,
        max_connections: int | None = None,
    ) -> RunResources:
        """`settings`: the runtime settings file (`load_settings`); without it every
        provider is served by the embedded llama-server. `store`: where runs are
        recorded and conversations kept (none: a chatflow is a conversation of one
        turn). `clients` replaces the routes with your own provider of transport
        clients; `code_executor` the one built from `settings.code_executor` on
        first use. `loader` loads the workflows that workflow tools name
        (`load_workflow`; none: workflow tools cannot run). `max_connections`: per
        route (a stream holds one)."""
        opened = ExitStack()
        tracing = settings.telemetry.tracing() if settings is not None else None
        if tracing is not None:  # the process's tracing, while these resources are open
            opened.callback(install(tracing).close)
        routes = None
        if clients is None:
            routes = RouteClients(ModelRoutes(settings), max_connections=max_connections)
            opened.callback(routes.close)
            clients = routes
        return cls(settings, clients, store, loader, routes, code_executor, opened)

    @property
    def code_executor(self) -> CodeExecutor:
        """Built on first use (no process starts before a code node needs one).

        Raises RouteError when a dify-sandbox key variable is named but unset."""
        with self._lock:
            if self._code_executor is None:
                section = self.settings.code_executor if self.settings else None
                executor = build_code_executor(section)
                self._opened.callback(executor.close)
                self._code_executor = executor
            return self._code_executor

    def warm_up_code_executor(self) -> None:
        """Start the executor's workers in the background; a code node waits for
        one if it must (and reports a start that failed)."""
        executor = self.code_executor

        def start() -> None:
            with contextlib.suppress(Exception):
                executor.start()

        threading.Thread(target=start, daemon=True).start()

    def check_routes(self, providers: Iterable[str]) -> None:
        """RouteError when a route these providers use has its credential unset."""
        if self.routes is not None:
            self.routes.routes.check(providers)

    def start_local(self, providers: Iterable[str]) -> None:
        """Start the embedded llama-server if these providers are served by it
        (once; it lives until `close`)."""
        if self.routes is not None and self.routes.needs_local(providers):
            self.routes.start_local()

    def connectors(self) -> Connectors:
        """A run's connectors (the run closes them); its workflow tools run on these
        resources."""
        connectors = Connectors.from_settings(self.settings)
        connectors.forms = self.store
        if self.loader is not None:
            connectors.workflow_tools = WorkflowTools(self, self.loader)
        return connectors

    def close(self) -> None:
        self._opened.close()

    def __enter__(self) -> RunResources:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
