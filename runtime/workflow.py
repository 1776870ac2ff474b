"""A loaded workflow: the validated graph and what the app declares around it
(environment and conversation variables, file uploads), ready to run any
number of times; `load_workflow` makes one (with `runtime.loader`)."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
import weakref
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from firstgate.common.files import FileRules
from firstgate.nodes import start
from firstgate.nodes.base import Role
from firstgate.nodes.templates.jinja import reserve_templates
from firstgate.runtime.dsl.graph import Graph, NodeDef
from firstgate.runtime.execution.checkpoint import (
    PAUSED,
    RUNNING,
    Checkpointer,
    CheckpointError,
    Resolved,
    Snapshot,
    check_graph,
    decode,
)
from firstgate.runtime.execution.checkpoint import read as read_checkpoint
from firstgate.runtime.execution.engine import Resume, WorkflowRun
from firstgate.runtime.execution.environment import EnvVar
from firstgate.runtime.execution.events import CHAT_MODE
from firstgate.runtime.execution.resources import RunResources
from firstgate.runtime.execution.session import RunOptions, RunSession, open_session
from firstgate.runtime.loader import collector_paused, load_document
from firstgate.runtime.models.routes import RouteError
from firstgate.store.base import CheckpointRecord
from firstgate.store.relational import owner_token

if TYPE_CHECKING:
    from firstgate.runtime.dsl.app_modes import EasyApp
    from firstgate.runtime.dsl.dsl_models import Document, FileUpload
    from firstgate.runtime.settings import RuntimeSettings

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
    # An easy-mode app (chat, agent-chat, completion) this graph was compiled from.
    easy: EasyApp | None = None
    # `features.retriever_resource`: the knowledge an answer used goes in `message_end`.
    show_retriever_resources: bool = False
    # Located `Problem`s Dify would load too (see the loader): `validate`
    # prints them, the first run logs them.
    warnings: list[Any] = field(default_factory=list)
    warned: bool = field(default=False, repr=False, compare=False)
    _root_graphs: dict[str, Graph] = field(default_factory=dict, repr=False, compare=False)
    # The hash of the app's graph and variables (what `workflow_id` is made from):
    # a checkpoint taken under another is refused.
    graph_hash: str = ""

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

    @property
    def roots(self) -> list[NodeDef]:
        """Where runs may start: the start node, or each trigger."""
        return [n for n in self.graph.nodes.values() if n.spec.role is Role.ROOT]

    @property
    def triggered(self) -> bool:
        """Whether runs start from triggers (webhook, schedule), not from a caller."""
        return self.start_node.spec.trigger

    @property
    def input_variables(self) -> list[start.InputVariable]:
        """The start node's declared inputs (a trigger declares none)."""
        data = self.start_node.data
        return list(data.variables) if isinstance(data, start.Data) else []

    def graph_from(self, root: str | None) -> Graph:
        """The graph a run from `root` runs: what that root reaches (Dify builds a
        triggered run's graph from its root node; another trigger's branch is not part
        of it). None: the workflow's first root."""
        root = root or self.graph.start_id
        if root == self.graph.start_id and len(self.roots) == 1:
            return self.graph
        node = self.graph.nodes.get(root)
        if node is None or node.spec.role is not Role.ROOT:
            raise start.InputError("dsl.input.noRoot", node=root)
        cached = self._root_graphs.get(root)
        if cached is None:
            reach = replace(self.graph, start_id=root).reachable
            cached = Graph(
                nodes={k: v for k, v in self.graph.nodes.items() if k in reach},
                edges=[e for e in self.graph.edges if e.source in reach and e.target in reach],
                start_id=root,
                children={k: v for k, v in self.graph.children.items() if k in reach},
            )
            self._root_graphs[root] = cached
        return cached

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
        self, inputs: Mapping[str, Any], query: str | None = None, root: str | None = None
    ) -> tuple[dict[str, Any], str | None]:
        """The inputs as the run's root accepts them (the start node's declared
        variables, a trigger's request), and sys.query.

        In an advanced-chat flow an input named `query` that the start node
        does not declare is the user's message (sys.query).
        """
        graph = self.graph_from(root)
        node = graph.nodes[graph.start_id]
        values = dict(inputs)
        declared = node.spec.output_names(node.data)
        if query is None and self.chat and "query" in values and "query" not in declared:
            query = str(values.pop("query"))
        assert node.spec.accepts is not None  # every root declares it (nodes/spec.py)
        return node.spec.accepts(node.data, values, self.upload_config), query

    def run(
        self,
        inputs: Mapping[str, Any] | None = None,
        options: RunOptions | None = None,
        resources: RunResources | None = None,
        *,
        settings: RuntimeSettings | None = None,
    ) -> WorkflowRun:
        """Start a run; iterate the returned object for events, call `.abort()` to stop it.

        `options` are this run's choices (`RunOptions`: the chat message, the
        conversation, the user, files, limits...). `resources` are what runs
        share (`RunResources`: routes, code executor, store, loader), opened
        and closed by the caller. Without them the run opens its own from
        `settings` (the runtime settings file's content, `load_settings`;
        without it every provider is served by the embedded llama-server) and
        closes them when it ends; without a store a chatflow is a
        conversation of one turn.

        Raises start.InputError for inputs that do not fit, RouteError for a
        route whose credential variable is unset or a plugin with no daemon, EnvVarError for a bad
        environment value, StoreError when the conversation cannot be taken.
        """
        if self.warnings and not self.warned:
            self.warned = True  # once per loaded workflow, not once per run
            for warning in self.warnings:
                _log.warning("%s", warning.render())
        options = options or RunOptions()
        owned = ExitStack()  # what the run closes when it ends (or this, if it cannot start)
        try:
            if resources is None:
                resources = owned.enter_context(RunResources.open(settings, loader=load_workflow))
            elif settings is not None:
                raise TypeError("settings come with the resources: RunResources.open(settings)")
            return self._start(inputs or {}, options, resources, owned)
        except BaseException:
            owned.close()
            raise

    def _start(
        self,
        inputs: Mapping[str, Any],
        options: RunOptions,
        resources: RunResources,
        owned: ExitStack,
    ) -> WorkflowRun:
        values, sys_query = self.prepare_inputs(inputs, options.query, options.root)
        graph = self.graph_from(options.root)
        options = replace(options, query=sys_query)
        self.check_plugin_daemon(resources.settings)
        providers = self.llm_providers()
        resources.check_routes(providers)
        seconds = options.limits.max_run_seconds
        lease = seconds + _LEASE_MARGIN_S if seconds else _UNLIMITED_LEASE_S
        store = resources.store if options.recorded else None
        # One token for the run's hold on its checkpoint and its turn's on the
        # conversation: a resumption that takes the one over knows the other.
        owner = owner_token()
        session = open_session(self, options, store=store, lease_seconds=lease, owner=owner)
        owned.callback(session.close)
        if options.files and not self.file_upload.enabled:
            raise start.InputError("dsl.input.filesDisabled")
        session.attach_files(self.file_upload.rules, self.file_upload.limit)
        session.note_input_files(values)
        return self._engine(graph, values, options, resources, session, owned, None, None, owner)

    def _engine(
        self,
        graph: Graph,
        values: dict[str, Any],
        options: RunOptions,
        resources: RunResources,
        session: RunSession,
        owned: ExitStack,
        resume: Resume | None,
        record: CheckpointRecord | None,
        owner: str | None = None,
    ) -> WorkflowRun:
        store = session.store
        checkpointer = None
        if store is not None:
            lease = _checkpoint_lease(options)
            # A resumed run goes on under the hold its claim took.
            if record is not None and record.owner:
                owner = record.owner
            owner = owner or owner_token()
            checkpointer = Checkpointer(store, owner=owner, lease_seconds=lease)
            if record is not None:
                checkpointer.resumed(record)
        return WorkflowRun(
            graph,
            values,
            session=session,
            resources=resources,
            providers=self.llm_providers(),
            limits=options.limits,
            max_workers=options.max_workers,
            warm_code_executor=self.uses_code_executor(),
            owned=owned,
            graph_hash=self.graph_hash,
            checkpointer=checkpointer,
            durability=options.durability,
            batch_ms=options.durability_batch_ms,
            resume=resume,
        )

    def resume(
        self,
        source: Snapshot | str,
        options: RunOptions | None = None,
        resources: RunResources | None = None,
        *,
        resolved: Mapping[str, Resolved] | None = None,
        settings: RuntimeSettings | None = None,
        take_over: bool = False,
    ) -> WorkflowRun:
        """Go on with a run from its checkpoint: `source` is a run id (its latest
        checkpoint, read from the resources' store and taken there, so that one
        process resumes it) or a `Snapshot` (`WorkflowRun.checkpoint`). The run keeps
        its run, task, conversation and message ids, its event positions go on, and
        each paused node named in `resolved` finishes with its `Resolved` outputs and
        takes its handle's edge; the others stay paused.

        `options` give the environment, limits, workers and durability (the run's
        own ids, inputs and query come from the checkpoint). Raises CheckpointError
        for a run with no checkpoint (finished, stopped, unknown), one taken under
        another graph (`graph_hash`), one another process holds, or a `resolved`
        node that is not paused. `take_over`: the caller holds the run by other
        means (serve's broker lease), so the store's holder is not asked.
        """
        options = options or RunOptions()
        resolved = dict(resolved or {})
        owned = ExitStack()
        try:
            if resources is None:
                resources = owned.enter_context(RunResources.open(settings, loader=load_workflow))
            elif settings is not None:
                raise TypeError("settings come with the resources: RunResources.open(settings)")
            return self._resume(source, options, resources, resolved, owned, take_over)
        except BaseException:
            owned.close()
            raise

    def _resume(
        self,
        source: Snapshot | str,
        options: RunOptions,
        resources: RunResources,
        resolved: dict[str, Resolved],
        owned: ExitStack,
        take_over: bool,
    ) -> WorkflowRun:
        store = resources.store if options.recorded else None
        record: CheckpointRecord | None = None
        if isinstance(source, str):
            if store is None:
                raise CheckpointError("errors.checkpoint.noStore", run=source)
            snapshot, record = read_checkpoint(store, source)
        else:
            snapshot = source
        check_graph(snapshot, self.graph_hash, self.name)
        paused = snapshot.paused_nodes()
        for node_id in resolved:
            if node_id not in paused:
                raise CheckpointError(
                    "errors.checkpoint.notPaused",
                    run=snapshot.run.workflow_run_id,
                    node=node_id,
                    paused=", ".join(paused) or "-",
                )
        self.check_plugin_daemon(resources.settings)
        resources.check_routes(self.llm_providers())
        # The earlier attempt's hold, when the caller took the run over from it.
        previous = record.owner if take_over and record is not None else None
        if store is not None:
            record = store.claim_checkpoint(
                snapshot.run.workflow_run_id,
                owner=owner_token(),
                lease_seconds=_checkpoint_lease(options),
                statuses=(PAUSED, RUNNING),
                take_over=take_over,
            )
            if record is None:
                raise CheckpointError("errors.checkpoint.busy", run=snapshot.run.workflow_run_id)
            if isinstance(source, str) and record.position != snapshot.position:
                # The claim applied what the run's journal held (its process died before
                # its tables caught up): the run goes on from there.
                snapshot, record = read_checkpoint(store, source)
                check_graph(snapshot, self.graph_hash, self.name)
        info = snapshot.run.info()
        options = replace(
            options,
            query=snapshot.query,
            conversation_id=info.conversation_id,
            user_id=info.user_id,
            run_id=info.workflow_run_id,
            task_id=info.task_id,
            root=snapshot.root,
        )
        seconds = options.limits.max_run_seconds
        lease = seconds + _LEASE_MARGIN_S if seconds else _UNLIMITED_LEASE_S
        session = open_session(
            self,
            options,
            store=store,
            lease_seconds=lease,
            info=info,
            owner=record.owner if record is not None else None,
            take_over_from=previous,
        )
        owned.callback(session.close)
        session.started_at = snapshot.started_at
        inputs = decode(snapshot.inputs)
        session.note_input_files(inputs)
        resume = Resume(snapshot, resolved, parts_written=record is not None)
        graph = self.graph_from(snapshot.root)
        return self._engine(graph, inputs, options, resources, session, owned, resume, record)


def _checkpoint_lease(options: RunOptions) -> float:
    """How long a run's hold on its checkpoint lasts without a newer checkpoint."""
    seconds = options.limits.max_run_seconds
    return seconds + _LEASE_MARGIN_S if seconds else _UNLIMITED_LEASE_S


def load_workflow(
    source: str | Path | Mapping[str, Any],
    *,
    settings: RuntimeSettings | None = None,
    stem: str | None = None,
) -> Workflow:
    """A workflow from a DSL file path or an already-parsed mapping.

    `settings` (the runtime settings the workflow will run with) lets a node
    check what only the settings can supply, e.g. the definition of an `api`
    tool. `stem` is the export's file name without its suffix (a path gives
    its own): part of the app id, so two exports of one name are two apps.
    Raises DslError listing every problem found, not only the first.
    """
    with collector_paused():
        loaded = load_document(source, settings=settings, stem=stem)
        document = loaded.document
        return Workflow(
            name=document.app.name,
            mode=document.app.mode,
            graph=loaded.graph,
            templates=loaded.templates,
            easy=loaded.easy,
            warnings=loaded.warnings,
            **declarations(document, loaded.stem),
        )


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
    digest = hashlib.sha256(content.encode()).hexdigest()
    return {
        "graph_hash": digest,
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
        "workflow_id": _derived_id("workflow", digest),
    }
