"""What a run starts from and leaves behind, apart from the graph: its identity
(Dify's ids), its system, environment and conversation variables, the
conversation's earlier turns, and where it is recorded.

The chatflow path: `open_session` takes the conversation from the store (a
lease: turns of one conversation run one after another), reads its variables
and history, and builds `sys.*`; the engine runs; `RunSession.finish` writes
the turn in one transaction (message, run, node executions, files, and the
conversation variables the turn wrote if it succeeded). Without a store a
chatflow still runs, as a conversation of one turn.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from firstgate.common.files import File, FileRules, TransferMethod, file_type_for
from firstgate.common.storable_text import mend
from firstgate.nodes.base import ChatTurn
from firstgate.nodes.start import coerce_files
from firstgate.nodes.values import jsonable
from firstgate.runtime.execution.checkpoint import DEFAULT_BATCH_MS, Durability
from firstgate.runtime.execution.environment import EnvVar, resolve
from firstgate.runtime.execution.events import CHAT_MODE, RunInfo
from firstgate.runtime.execution.limits import RunLimits
from firstgate.runtime.execution.redaction import Redactor
from firstgate.store.base import (
    MESSAGE_ERROR,
    MESSAGE_NORMAL,
    MESSAGE_STOPPED,
    SYS_FILES,
    TRIGGERED_APP_RUN,
    FileRecord,
    MessageRecord,
    NodeExecutionRecord,
    RunRecord,
    Store,
    StoreError,
    Turn,
    TurnResult,
    VariableValue,
)

log = logging.getLogger(__name__)


class ConversationSpec(Protocol):
    """A declared conversation variable, as the session reads it."""

    @property
    def name(self) -> str: ...
    @property
    def value_type(self) -> str: ...
    @property
    def default(self) -> Any: ...


class SessionApp(Protocol):
    """What a session needs from a loaded workflow (a protocol, so the session
    never imports the workflow module, which builds on it)."""

    @property
    def mode(self) -> str: ...
    @property
    def app_id(self) -> str: ...
    @property
    def workflow_id(self) -> str: ...
    @property
    def environment_variables(self) -> Sequence[EnvVar]: ...
    @property
    def conversation_variables(self) -> Sequence[ConversationSpec]: ...
    @property
    def show_retriever_resources(self) -> bool: ...


DEFAULT_USER = "firstgate"
# How long a turn waits for an earlier turn of the same conversation to end.
DEFAULT_TURN_WAIT_S = 300.0


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What the caller chose for one run (CLI flags, an API request): `Workflow.run`'s
    options. What runs share (routes, executor, store) is `runtime.resources.RunResources`.

    A chatflow takes the user's message as `query` and continues conversation
    `conversation_id` (a new one when None or unknown) for `user_id`. `files`
    are `sys.files`: File objects, paths, http(s) URLs. Environment variables
    come from `environ` (default: the process's FIRSTGATE_ENV_<NAME>), then
    `env_file_values`, then the DSL."""

    query: str | None = None
    conversation_id: str | None = None
    user_id: str = DEFAULT_USER
    files: Sequence[Any] = ()
    environ: Mapping[str, str] | None = None
    env_file_values: Mapping[str, str] | None = None
    limits: RunLimits = RunLimits()
    max_workers: int = 16  # node attempts running at once on worker threads
    turn_wait_s: float = DEFAULT_TURN_WAIT_S  # for an earlier turn of the conversation
    run_id: str | None = None
    task_id: str | None = None  # given when the run was queued before it started (serve's workers)
    # The root it starts at (a trigger's node id); None: the workflow's first root.
    root: str | None = None
    # Whether the run is recorded in the store (a workflow tool's inner run is
    # part of its outer run's record).
    recorded: bool = True
    # When the run's state reaches the store (`runtime/execution/checkpoint.py`):
    # batched (the default: at most one commit every `durability_batch_ms`, the
    # first that long after the start, so a short run writes nothing before its
    # end), after every node, or at the end only.
    durability: Durability = Durability.BATCHED
    durability_batch_ms: int = DEFAULT_BATCH_MS
    # How it was started, as its record says (`store.base`'s TRIGGERED_*).
    triggered_from: str = TRIGGERED_APP_RUN
    # The caller's W3C `traceparent` (serve's request header): the run's trace
    # continues the caller's; malformed or None starts a new one.
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class RunSummary:
    """How a run ended, as the engine hands it over for recording."""

    status: str  # succeeded | partial-succeeded | failed | stopped
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    error: str | None
    elapsed_time: float
    total_tokens: int
    total_steps: int
    exceptions_count: int
    nodes: Sequence[NodeExecutionRecord]
    answer: str = ""
    conversation: Mapping[str, Any] = field(default_factory=dict)  # variables written


class RunSession:
    def __init__(
        self,
        workflow: SessionApp,
        options: RunOptions,
        *,
        info: RunInfo,
        environment: dict[str, Any],
        redactor: Redactor,
        turn: Turn | None,
        store: Store | None = None,
    ) -> None:
        self.workflow = workflow
        self.options = options
        self.store = store
        self.info = info
        self.environment = environment
        self.redactor = redactor
        self.turn = turn
        self.started_at = time.time()
        self.conversation_types = {v.name: v.value_type for v in workflow.conversation_variables}
        self.conversation = {v.name: v.default for v in workflow.conversation_variables}
        self.history: list[ChatTurn] = []
        dialogue_count = 0
        if turn is not None:
            for name, stored in turn.state.variables.items():
                if self.conversation_types.get(name) == stored.value_type:
                    self.conversation[name] = stored.value
            self.history = [
                ChatTurn(h.query, h.answer, h.thoughts, tuple(_history_files(h.files)))
                for h in turn.state.history
            ]
            dialogue_count = turn.state.dialogue_count
        self.files: list[tuple[str, File]] = []
        self.system: dict[str, Any] = {
            "files": [],
            "user_id": info.user_id,
            "app_id": info.app_id,
            "workflow_id": info.workflow_id,
            "workflow_run_id": info.workflow_run_id,
        }
        if info.chat:
            self.system.update(
                query=options.query or "",
                conversation_id=info.conversation_id,
                dialogue_count=dialogue_count,
            )

    def attach_files(self, rules: FileRules, limit: int | None) -> None:
        """`sys.files`: the chat's uploads (or a workflow's), checked against the app's rules."""
        if not self.options.files:
            return
        found = coerce_files(SYS_FILES, list(self.options.files), rules, many=True, limit=limit)
        assert isinstance(found, list)
        self.system["files"] = found
        self.files.extend((SYS_FILES, f) for f in found)

    def note_input_files(self, inputs: Mapping[str, Any]) -> None:
        for name, value in inputs.items():
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, File):
                    self.files.append((name, item))

    # ---- the end

    def finish(self, summary: RunSummary, *, written: int = 0) -> None:
        """Record the run (and the chat turn) in the store, in one transaction;
        the first `written` of its node executions are there already (its
        checkpoints wrote them) and are not written again.

        When the store refuses the record (a value it cannot hold, a full disk,
        a dropped connection) the run is recorded again as failed, its text made
        storable, and StoreError says so; the conversation is released either way.
        """
        store = self.store
        run = self._run_record(summary, written)
        if self.turn is None:
            if store is not None:
                self._record(lambda r, _m, _v: store.record_run(r), run, None, {})
            return
        status = {
            "succeeded": MESSAGE_NORMAL,
            "partial-succeeded": MESSAGE_NORMAL,
            "stopped": MESSAGE_STOPPED,
        }.get(summary.status, MESSAGE_ERROR)
        message = MessageRecord(
            id=self.info.message_id or run.id,
            query=self.redactor.text(self.options.query or ""),
            answer=self.redactor.text(summary.answer),
            status=status,
            error=summary.error,
            total_tokens=summary.total_tokens,
            created_at=self.started_at,
        )
        variables = {
            name: VariableValue(self.conversation_types.get(name, "string"), jsonable(value))
            for name, value in summary.conversation.items()
        }
        turn = self.turn

        def commit(
            run: RunRecord, message: MessageRecord | None, variables: Mapping[str, VariableValue]
        ) -> None:
            assert message is not None
            turn.commit(TurnResult(run=run, message=message, variables=variables))

        try:
            self._record(commit, run, message, variables)
        finally:
            # A commit ends the turn; otherwise the lease must go now, not when it
            # expires (the run's time limit later), or the conversation stays busy.
            self.turn = None
            with contextlib.suppress(Exception):  # unreachable store: the lease expires
                turn.release()

    def _record(
        self,
        write: Callable[[RunRecord, MessageRecord | None, Mapping[str, VariableValue]], None],
        run: RunRecord,
        message: MessageRecord | None,
        variables: Mapping[str, VariableValue],
    ) -> None:
        """`write` the records; when that fails, write them again as a failure with
        every text storable, then raise a StoreError that quotes nothing it got."""
        try:
            write(run, message, variables)
            return
        except Exception as exc:  # noqa: BLE001 - any refusal of the store is handled alike
            # The driver's words (a value, a PostgreSQL error dict) go to the log only.
            log.warning("run %s was not recorded: %s", run.id, self.redactor.text(repr(exc)))
            failure = exc if isinstance(exc, StoreError) else StoreError("errors.store.notRecorded")
        error = run.error if run.status == "failed" and run.error else str(failure)
        failed_run = storable(dataclasses.replace(run, status="failed", error=error))
        failed_message = None
        if message is not None:
            failed_message = storable(
                dataclasses.replace(message, status=MESSAGE_ERROR, error=error)
            )
        try:
            write(failed_run, failed_message, {})  # a failed turn writes no variable
        except Exception as exc:  # noqa: BLE001 - the failure below is what the run reports
            log.warning("run %s was not recorded as failed: %s", run.id, repr(exc))
        raise failure

    def close(self) -> None:
        """Give the conversation up if the run ended without `finish` (idempotent)."""
        if self.turn is not None:
            turn, self.turn = self.turn, None
            turn.release()

    def progress_record(
        self, summary: RunSummary, nodes: Sequence[NodeExecutionRecord]
    ) -> RunRecord:
        """The run's record while it runs or is paused (with these node executions)."""
        return storable(dataclasses.replace(self._run_record(summary), nodes=list(nodes), files=[]))

    def _run_record(self, summary: RunSummary, written: int = 0) -> RunRecord:
        redact = self.redactor.value
        return RunRecord(
            id=self.info.workflow_run_id,
            app_id=self.info.app_id,
            workflow_id=self.info.workflow_id,
            mode=self.info.mode,
            user_id=self.info.user_id,
            status=summary.status,
            inputs=redact(jsonable(dict(summary.inputs))),
            outputs=redact(jsonable(dict(summary.outputs))),
            error=summary.error,
            elapsed_time=summary.elapsed_time,
            total_tokens=summary.total_tokens,
            total_steps=summary.total_steps,
            exceptions_count=summary.exceptions_count,
            created_at=self.started_at,
            finished_at=time.time(),
            nodes=list(summary.nodes[written:]),
            files=[_file_record(name, f) for name, f in self.files],
            triggered_from=self.options.triggered_from,
        )


def storable(value: Any) -> Any:
    """`value` (records, mappings, lists, text) with every text storable: surrogate
    pairs joined, lone surrogates and NUL as U+FFFD."""
    if isinstance(value, str):
        return mend(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: storable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    if isinstance(value, Mapping):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


def _history_files(records: Sequence[FileRecord]) -> Iterator[File]:
    """An earlier turn's files as it received them; one no longer there is left out
    (a later turn does not fail for a deleted upload)."""
    for record in records:
        path = Path(record.path) if record.path else None
        if record.remote_url is None and (path is None or not path.is_file()):
            continue
        yield File(
            type=file_type_for(record.extension, record.mime_type),
            transfer_method=TransferMethod(record.transfer_method),
            filename=record.filename,
            extension=record.extension,
            mime_type=record.mime_type,
            size=record.size,
            related_id=record.id,
            remote_url=record.remote_url,
            path=path,
        )


def _file_record(variable: str, file: File) -> FileRecord:
    return FileRecord(
        id=file.related_id or file.id,
        variable=variable,
        belongs_to="user",
        filename=file.filename,
        extension=file.extension,
        mime_type=file.mime_type,
        size=file.size,
        transfer_method=file.transfer_method.value,
        remote_url=file.remote_url,
        path=str(file.path) if file.path is not None else None,
    )


def open_session(
    workflow: SessionApp,
    options: RunOptions,
    *,
    store: Store | None,
    lease_seconds: float,
    info: RunInfo | None = None,
    owner: str | None = None,
    take_over_from: str | None = None,
) -> RunSession:
    """Resolve the environment, take the conversation (chatflows, from `store`), build
    the ids (`info`: those of a run that goes on from its checkpoint). `owner`: the
    conversation's lease token, the run's own hold on its checkpoint; `take_over_from`:
    the hold of the run's earlier attempt, whose lease on the conversation passes
    to this one at once (the same turn)."""
    environment, redactor = resolve(
        workflow.environment_variables, options.environ, options.env_file_values
    )
    chat = workflow.mode == CHAT_MODE
    conversation_id = (options.conversation_id or str(uuid.uuid4())) if chat else None
    if info is not None:
        conversation_id = info.conversation_id
    turn: Turn | None = None
    if chat and store is not None:
        assert conversation_id is not None
        turn = store.begin_turn(
            conversation_id,
            app_id=workflow.app_id,
            user_id=options.user_id,
            mode=workflow.mode,
            lease_seconds=lease_seconds,
            wait_seconds=options.turn_wait_s,
            owner=owner,
            take_over_from=take_over_from,
        )
    info = info or RunInfo(
        task_id=options.task_id or str(uuid.uuid4()),
        workflow_run_id=options.run_id or str(uuid.uuid4()),
        workflow_id=workflow.workflow_id,
        app_id=workflow.app_id,
        mode=workflow.mode,
        user_id=options.user_id,
        created_at=int(time.time()),
        conversation_id=conversation_id,
        message_id=str(uuid.uuid4()) if chat else None,
    )
    return RunSession(
        workflow,
        options,
        info=info,
        environment=environment,
        redactor=redactor,
        turn=turn,
        store=store,
    )
