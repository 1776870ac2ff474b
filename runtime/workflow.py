"""A loaded workflow: the validated graph, ready to run any number of times."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from connectors.hub import Connectors
from nodes import start
from runtime.code_executors import build_code_executor
from runtime.engine import WorkflowRun
from runtime.graph import Graph, NodeDef
from runtime.limits import RunLimits
from runtime.route_clients import RouteClients
from runtime.routes import ModelRoutes

if TYPE_CHECKING:
    from nodes.base import Clients
    from runtime.settings import RuntimeSettings
    from sandbox.executor import CodeExecutor


@dataclass(slots=True)
class Workflow:
    name: str
    mode: str  # "workflow" | "advanced-chat"
    graph: Graph
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def start_node(self) -> NodeDef:
        return self.graph.nodes[self.graph.start_id]

    def llm_providers(self) -> set[str]:
        """Providers of the model-calling nodes the run can reach."""
        return {
            provider
            for n in self.graph.nodes.values()
            if n.id in self.graph.reachable
            for provider in n.spec.model_providers(n.data)
        }

    def uses_code_executor(self) -> bool:
        """Whether a node the run can reach runs code (so the executor starts with the run)."""
        return any(
            n.spec.uses_code_executor
            for n in self.graph.nodes.values()
            if n.id in self.graph.reachable
        )

    def prepare_inputs(
        self, inputs: Mapping[str, Any], query: str | None = None
    ) -> tuple[dict[str, Any], str]:
        """Validated start inputs and sys.query.

        In an advanced-chat flow an input named `query` that the start node
        does not declare is the user's message (sys.query).
        """
        data: start.Data = self.start_node.data  # type: ignore[assignment]
        values = dict(inputs)
        declared = start.output_names(data)
        if (
            query is None
            and self.mode == "advanced-chat"
            and "query" in values
            and "query" not in declared
        ):
            query = str(values.pop("query"))
        return start.validate_inputs(data, values), query or ""

    def run(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        query: str | None = None,
        settings: RuntimeSettings | None = None,
        limits: RunLimits | None = None,
        max_workers: int = 16,
        run_id: str | None = None,
        clients: Clients | None = None,
        code_executor: CodeExecutor | None = None,
    ) -> WorkflowRun:
        """Start a run; iterate the returned object for events, call `.abort()` to stop it.

        `settings` is the runtime settings file's content (`load_settings`);
        without it every provider is served by the embedded llama-server.
        Raises start.InputError for inputs that do not fit the start node and
        RouteError for a route whose credential variable is unset. `clients`
        replaces the routes with your own provider of transport clients.
        `code_executor` (yours to start and close, shared by as many runs as you
        like) replaces the one the run builds from `settings.code_executor`
        and closes when it ends.
        """
        values, sys_query = self.prepare_inputs(inputs or {}, query)
        providers = self.llm_providers()
        if clients is None:
            routes = ModelRoutes(settings)
            routes.check(providers)
            clients = RouteClients(routes)
        owns_executor = code_executor is None
        if code_executor is None:
            code_executor = build_code_executor(settings.code_executor if settings else None)
        return WorkflowRun(
            self.graph,
            values,
            environment=self.environment,
            providers=providers,
            query=sys_query,
            clients=clients,
            limits=limits or RunLimits(),
            max_workers=max_workers,
            run_id=run_id or str(uuid.uuid4()),
            code_executor=code_executor,
            owns_code_executor=owns_executor,
            start_code_executor=self.uses_code_executor(),
            connectors=Connectors.from_settings(settings),
        )
