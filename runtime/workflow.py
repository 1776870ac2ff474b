"""A loaded workflow: the validated graph and what the app declares around it
(environment and conversation variables, file uploads), ready to run any
number of times."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from firstgate.common.files import FileRules
from firstgate.connectors.hub import Connectors
from firstgate.nodes import start
from firstgate.nodes.templates.jinja import reserve_templates
from firstgate.runtime.dsl.graph import Graph, NodeDef
from firstgate.runtime.execution.code_executors import build_code_executor
from firstgate.runtime.execution.engine import WorkflowRun
from firstgate.runtime.execution.environment import EnvVar
from firstgate.runtime.execution.events import CHAT_MODE
from firstgate.runtime.execution.limits import RunLimits
from firstgate.runtime.execution.session import (
    DEFAULT_TURN_WAIT_S,
    DEFAULT_USER,
    RunOptions,
    open_session,
)
from firstgate.runtime.execution.workflow_tools import Loader, WorkflowTools
from firstgate.runtime.models.route_clients import RouteClients
from firstgate.runtime.models.routes import ModelRoutes, RouteError

if TYPE_CHECKING:
    from firstgate.nodes.base import Clients
    from firstgate.runtime.dsl.app_modes import EasyApp
    from firstgate.runtime.dsl.dsl_models import Document, FileUpload
    from firstgate.runtime.settings import RuntimeSettings
    from firstgate.sandbox.executor import CodeExecutor
    from firstgate.store.base import Store

# Namespace of the ids firstgate derives for an app and a workflow version.
_ID_NAMESPACE = uuid.UUID("6f1d0c9e-5b4a-4c1f-9a53-2f6b7f3e8d10")
# A conversation's lease outlives the run's time limit by this much.
_LEASE_MARGIN_S = 60.0
_UNLIMITED_LEASE_S = 24 * 3600.0
_log = logging.getLogger("firstgate.workflow")


@dataclass(frozen=True, slots=True)
class ConversationVar:
    name: str
    value_type: str
    default: Any


@dataclass(frozen=True, slots=True)
class FileUploadRules:
    """`features.file_upload`: whether the app takes files in `sys.files`."""

    enabled: bool = False
    rules: FileRules = field(default_factory=FileRules)
    limit: int | None = None


@dataclass(slots=True, weakref_slot=True)
class Workflow:
    name: str
    mode: str  # "workflow" | "advanced-chat"
    graph: Graph
    environment_variables: list[EnvVar] = field(default_factory=list)
    conversation_variables: list[ConversationVar] = field(default_factory=list)
    file_upload: FileUploadRules = field(default_factory=FileUploadRules)
    upload_config: dict[str, Any] = field(default_factory=dict)
    # Dify's app id and workflow (version) id, derived: the app from its mode, name
    # and file stem (conversations, runs and uploads belong to it; the stem also
    # names serve's key, so two served exports never share one), the version from
    # the graph's content.
    app_id: str = ""
    workflow_id: str = ""
    # Distinct templates its nodes render: the compiled-template cache keeps room
    # for them as long as the workflow exists (`nodes.jinja.reserve_templates`).
    templates: int = 0
    # The loader that made this workflow: its workflow tools load theirs with it.
    loader: Loader | None = field(default=None, repr=False, compare=False)
    # An easy-mode app (chat, agent-chat, completion) this graph was compiled from.
    easy: EasyApp | None = None
    # `features.retriever_resource`: the knowledge an answer used goes in `message_end`.
    show_retriever_resources: bool = False
    # Located `Problem`s Dify would load too (see the loader): `validate`
    # prints them, the first run logs them.
    warnings: list[Any] = field(default_factory=list)
    warned: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.templates:
            weakref.finalize(self, reserve_templates(self.templates).release)

    @property
    def chat(self) -> bool:
        return self.mode == CHAT_MODE

    @property
    def app_mode(self) -> str:
        """Dify's app mode: the easy mode it was compiled from, else the graph's."""
        return self.easy.mode if self.easy is not None else self.mode

    @property
    def environment(self) -> dict[str, Any]:
        """The environment variables' values as the DSL gives them."""
        return {v.name: v.value for v in self.environment_variables}

    @property
    def start_node(self) -> NodeDef:
        return self.graph.nodes[self.graph.start_id]

    def llm_providers(self) -> set[str]:
        """Model providers the nodes the run can reach call (each node says which)."""
        return {
            provider
            for node in self.graph.reachable_nodes()
            for provider in node.needs.model_providers
        }

    def check_plugin_daemon(self, settings: RuntimeSettings | None) -> None:
        """Refuse, by node and by name, a run whose nodes hand work to a plugin
        when the settings name no plugin daemon to send it to."""
        if settings is not None and settings.tools.plugin_daemon is not None:
            return
        for node in self.graph.nodes.values():
            if node.needs.plugin and node.id in self.graph.reachable:
                raise RouteError(
                    "errors.plugin.noDaemon",
                    node=f"{node.id} ({node.title})",
                    plugin=node.needs.plugin,
                )

    def uses_code_executor(self) -> bool:
        """Whether a node the run can reach runs code (so the executor starts with the run)."""
        return any(n.needs.code_executor for n in self.graph.reachable_nodes())

    def prepare_inputs(
        self, inputs: Mapping[str, Any], query: str | None = None
    ) -> tuple[dict[str, Any], str | None]:
        """Validated start inputs and sys.query.

        In an advanced-chat flow an input named `query` that the start node
        does not declare is the user's message (sys.query).
        """
        data: start.Data = self.start_node.data  # type: ignore[assignment]
        values = dict(inputs)
        declared = start.output_names(data)
        if query is None and self.chat and "query" in values and "query" not in declared:
            query = str(values.pop("query"))
        return start.validate_inputs(data, values, self.upload_config), query

    def run(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        query: str | None = None,
        conversation_id: str | None = None,
        user: str = DEFAULT_USER,
        files: Sequence[Any] = (),
        store: Store | None = None,
        environ: Mapping[str, str] | None = None,
        env_file_values: Mapping[str, str] | None = None,
        settings: RuntimeSettings | None = None,
        limits: RunLimits | None = None,
        max_workers: int = 16,
        run_id: str | None = None,
        task_id: str | None = None,
        clients: Clients | None = None,
        turn_wait_s: float = DEFAULT_TURN_WAIT_S,
        code_executor: CodeExecutor | None = None,
    ) -> WorkflowRun:
        """Start a run; iterate the returned object for events, call `.abort()` to stop it.

        A chatflow takes the user's message as `query`, continues conversation
        `conversation_id` (a new one when None or unknown) for `user`, and keeps
        its variables and history in `store` (without one it is a conversation
        of one turn). `files` are `sys.files`: paths, http(s) URLs or File objects.
        Environment variables come from `environ` (default: the process's
        FIRSTGATE_ENV_<NAME>), then `env_file_values`, then the DSL.
        `settings` is the runtime settings file's content (`load_settings`);
        without it every provider is served by the embedded llama-server.

        Raises start.InputError for inputs that do not fit, RouteError for a
        route whose credential variable is unset or a plugin with no daemon, EnvVarError for a bad
        environment value, StoreError when the conversation cannot be taken.
        `clients` replaces the routes with your own provider of transport clients.
        `code_executor` (yours to start and close, shared by as many runs as you
        like) replaces the one the run builds from `settings.code_executor`
        and closes when it ends.
        """
        if self.warnings and not self.warned:
            self.warned = True  # once per loaded workflow, not once per run
            for warning in self.warnings:
                _log.warning("%s", warning.render())
        values, sys_query = self.prepare_inputs(inputs or {}, query)
        self.check_plugin_daemon(settings)
        providers = self.llm_providers()
        if clients is None:
            routes = ModelRoutes(settings)
            routes.check(providers)
            clients = RouteClients(routes)
        limits = limits or RunLimits()
        options = RunOptions(
            query=sys_query,
            conversation_id=conversation_id,
            user_id=user,
            files=files,
            store=store,
            environ=environ,
            env_file_values=env_file_values,
            turn_wait_s=turn_wait_s,
            run_id=run_id,
            task_id=task_id,
        )
        lease = (
            limits.max_run_seconds + _LEASE_MARGIN_S
            if limits.max_run_seconds
            else _UNLIMITED_LEASE_S
        )
        session = open_session(self, options, lease_seconds=lease)
        owns_executor = code_executor is None
        if code_executor is None:
            code_executor = build_code_executor(settings.code_executor if settings else None)
        try:
            if files and not self.file_upload.enabled:
                raise start.InputError("dsl.input.filesDisabled")
            session.attach_files(self.file_upload.rules, self.file_upload.limit)
            session.note_input_files(values)
            return WorkflowRun(
                self.graph,
                values,
                session=session,
                providers=providers,
                clients=clients,
                limits=limits,
                max_workers=max_workers,
                connectors=_connectors(settings, clients, code_executor, self.loader),
                code_executor=code_executor,
                owns_code_executor=owns_executor,
                start_code_executor=self.uses_code_executor(),
            )
        except BaseException:
            session.close()
            if owns_executor:
                code_executor.close()
            raise


def _connectors(
    settings: RuntimeSettings | None,
    clients: Clients,
    code_executor: CodeExecutor,
    loader: Loader | None,
) -> Connectors:
    connectors = Connectors.from_settings(settings)
    if loader is not None:
        # A workflow tool runs another workflow with this run's routes and executor.
        connectors.workflow_tools = WorkflowTools(settings, clients, code_executor, loader)
    return connectors


def _upload_rules(upload: FileUpload) -> FileUploadRules:
    if upload.enabled:
        rules = FileRules.from_config(
            upload.allowed_file_types,
            upload.allowed_file_extensions,
            upload.allowed_file_upload_methods,
            upload.fileUploadConfig,
        )
        return FileUploadRules(True, rules, upload.number_limits or None)
    if upload.image.enabled:
        # Older exports: images only, configured under `image`.
        rules = FileRules.from_config(
            ["image"], (), upload.image.transfer_methods, upload.fileUploadConfig
        )
        return FileUploadRules(True, rules, upload.image.number_limits or None)
    return FileUploadRules(False)


def _derived_id(*parts: str) -> str:
    return str(uuid.uuid5(_ID_NAMESPACE, "\x1f".join(parts)))


def derive_app_id(mode: str, name: str, stem: str | None) -> str:
    """The app id: the same file gives the same id wherever it lies (the CLI, serve,
    a worker); a mapping loaded without a stem keeps the id of its mode and name."""
    parts = ("app", mode, name) if stem is None else ("app", mode, name, "file", stem)
    return _derived_id(*parts)


def declarations(document: Document, stem: str | None = None) -> dict[str, Any]:
    """The `Workflow` fields that come from the document around the graph (and the
    export's file stem, for the app id)."""
    section = document.workflow
    upload = section.features.file_upload
    content = json.dumps(
        {
            "graph": section.graph.model_dump(mode="json"),
            "env": [v.model_dump(mode="json") for v in section.environment_variables],
            "conversation": [v.model_dump(mode="json") for v in section.conversation_variables],
        },
        sort_keys=True,
        default=str,
    )
    return {
        "environment_variables": [
            EnvVar(v.name, v.value_type, v.value) for v in section.environment_variables
        ],
        "conversation_variables": [
            ConversationVar(v.name, v.value_type, v.default) for v in section.conversation_variables
        ],
        "file_upload": _upload_rules(upload),
        "show_retriever_resources": section.features.retriever_resource.enabled,
        "upload_config": dict(upload.fileUploadConfig),
        "app_id": derive_app_id(document.app.mode, document.app.name, stem),
        "workflow_id": _derived_id("workflow", hashlib.sha256(content.encode()).hexdigest()),
    }
