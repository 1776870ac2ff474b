"""The store's one interface: what a run reads before it starts and writes when
it ends. SQLite implements it (`store.sqlite`); a PostgreSQL backend slots in
behind the same interface.

A chat turn holds its conversation for the whole run (a lease), so the turns
of one conversation are serialised: a second turn waits for the first and
sees everything it wrote. A turn writes nothing until it ends; then its
message, its run, its node executions, its files and (if it succeeded) its
conversation variables go in as one transaction. A turn that fails or is
stopped leaves the conversation's variables exactly as they were.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from firstgate.locales.localized_error import LocalizedError

# Message status, as Dify names it: a turn that failed or was stopped keeps its
# message (with what was streamed) but is left out of the conversation's memory.
# How a run was started, in Dify's words (its `WorkflowRunTriggeredFrom`): a
# Service API call or the command line, a webhook call, a schedule's tick.
TRIGGERED_APP_RUN = "app-run"
TRIGGERED_WEBHOOK = "webhook"
TRIGGERED_SCHEDULE = "schedule"
TRIGGERED_FROM = (TRIGGERED_APP_RUN, TRIGGERED_WEBHOOK, TRIGGERED_SCHEDULE)
MESSAGE_NORMAL = "normal"
MESSAGE_ERROR = "error"
MESSAGE_STOPPED = "stopped"
# The variable a chat turn's own files come in as (a file record's `variable`).
SYS_FILES = "sys.files"
# The node type whose process data keeps an agent's rounds (`agent_thoughts`).
AGENT_NODE_TYPE = "agent"


class StoreError(LocalizedError):
    """The state database cannot be used (unreadable, newer schema, conversation busy...)."""


@dataclass(frozen=True, slots=True)
class HistoryTurn:
    """One earlier turn of a conversation, as the LLM node's memory reads it;
    an agent app's memory also reads the turn's agent rounds (its agent nodes'
    `agent_thoughts`) and the files the user sent with it (`sys.files`)."""

    query: str
    answer: str
    thoughts: tuple[dict[str, Any], ...] = ()
    files: tuple[FileRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeExecutionRecord:
    id: str
    index: int
    node_id: str
    node_type: str
    title: str
    predecessor_node_id: str | None
    status: str
    inputs: Mapping[str, Any]
    process_data: Mapping[str, Any]
    outputs: Mapping[str, Any]
    error: str | None
    elapsed_time: float
    execution_metadata: Mapping[str, Any]
    created_at: float
    finished_at: float


@dataclass(frozen=True, slots=True)
class FileRecord:
    """A file a run received (`belongs_to` user) or produced (assistant)."""

    id: str  # the file's related_id
    variable: str  # the input it came in as, e.g. "doc" or "sys.files"
    belongs_to: str
    filename: str
    extension: str
    mime_type: str
    size: int
    transfer_method: str
    remote_url: str | None
    path: str | None


@dataclass(frozen=True, slots=True)
class RunRecord:
    id: str
    app_id: str
    workflow_id: str
    mode: str
    user_id: str
    status: str  # succeeded | partial-succeeded | failed | stopped
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    error: str | None
    elapsed_time: float
    total_tokens: int
    total_steps: int
    exceptions_count: int
    created_at: float
    finished_at: float
    nodes: Sequence[NodeExecutionRecord] = ()
    files: Sequence[FileRecord] = ()
    triggered_from: str = TRIGGERED_APP_RUN


@dataclass(slots=True)
class CheckpointRecord:
    """An unfinished run's latest checkpoint, as the store keeps it. `snapshot` is
    the runtime's versioned snapshot as JSON text (the store never reads it);
    `status` is `running` (a worker holds it, `owner` until `lease_expires_at`)
    or `paused` (nobody does: it waits to be resumed). Not frozen, though nothing
    changes one once made: one is made at every node, and a frozen dataclass's
    `__init__` takes twice a plain one's (about 1 us more)."""

    run_id: str
    app_id: str
    workflow_id: str
    graph_hash: str
    status: str
    version: int
    position: int
    snapshot: str
    owner: str | None = None
    lease_expires_at: float | None = None
    attempts: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    task_id: str | None = None  # the run's task (None: written before firstgate kept it)
    # Pieces of the snapshot written once and kept across checkpoints (a finished
    # node's outputs), by name: a checkpoint writes only the new ones.
    parts: Mapping[str, str] = field(default_factory=dict)
    # Finished nodes whose outputs are exactly those of one of the run's node
    # executions (node id -> execution id): the execution is marked, no part is
    # written. A checkpoint names those among the executions written with it.
    held: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MessageRecord:
    id: str
    query: str
    answer: str
    status: str  # MESSAGE_*
    error: str | None
    total_tokens: int
    created_at: float
    # Filled in when read back from the store (the turn's run holds them).
    conversation_id: str = ""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    workflow_run_id: str = ""


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    id: str
    app_id: str
    user_id: str
    mode: str
    name: str  # the first query, shortened (firstgate asks no model for a title)
    inputs: Mapping[str, Any]  # the first turn's inputs
    dialogue_count: int
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class FeedbackRecord:
    """An end user's rating of a message (one per message)."""

    message_id: str
    app_id: str
    conversation_id: str
    user_id: str
    rating: str  # like | dislike
    content: str | None
    created_at: float
    updated_at: float


# A human-input form's states: open until one submit, or its deadline, closes it.
FORM_WAITING, FORM_SUBMITTED, FORM_TIMEOUT = "waiting", "submitted", "timeout"


@dataclass(frozen=True, slots=True)
class FormRecord:
    """A human-input form a paused run waits on, found by its token.

    `definition` is what the recipient is shown and what a submit is checked
    against (plain JSON: content, inputs, actions, defaults); `submission` the
    values accepted with `action_id` once the form is closed by a submit."""

    id: str
    token: str
    app_id: str
    workflow_run_id: str
    node_id: str
    user_id: str
    definition: Mapping[str, Any]
    expires_at: float  # Unix seconds
    created_at: float
    status: str = FORM_WAITING
    action_id: str | None = None
    submission: Mapping[str, Any] | None = None
    closed_at: float | None = None
    # Where the run came from, for a resume that names only the token (the CLI
    # notes its workflow file and settings file here: JSON text).
    source: str | None = None


@dataclass(frozen=True, slots=True)
class UploadRecord:
    """A file uploaded through the API (`POST /v1/files/upload`), kept on disk at `path`."""

    id: str
    app_id: str
    user_id: str
    name: str
    size: int
    extension: str  # without the dot, as Dify reports it
    mime_type: str
    path: str
    created_at: float


@dataclass(frozen=True, slots=True)
class VariableValue:
    """A conversation variable as stored: its declared type and its value."""

    value_type: str
    value: Any


@dataclass(slots=True)
class TurnState:
    """What a chat turn starts from."""

    conversation_id: str
    is_new: bool
    variables: dict[str, VariableValue] = field(default_factory=dict)
    history: list[HistoryTurn] = field(default_factory=list)  # oldest first
    dialogue_count: int = 0  # completed turns before this one


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What a finished chat turn writes."""

    run: RunRecord
    message: MessageRecord
    # Variables this turn wrote; only applied when the message status is normal.
    variables: Mapping[str, VariableValue] = field(default_factory=dict)


class Turn(ABC):
    """A lease on one conversation for the length of one run."""

    state: TurnState

    @abstractmethod
    def commit(self, result: TurnResult) -> None:
        """Write the turn in one transaction and release the conversation. When
        it raises, nothing was written and the turn still holds the conversation:
        commit again (something smaller) or `release` it."""

    @abstractmethod
    def release(self) -> None:
        """Give the conversation up without writing (idempotent)."""


class Store(ABC):
    @abstractmethod
    def begin_turn(
        self,
        conversation_id: str,
        *,
        app_id: str,
        user_id: str,
        mode: str,
        lease_seconds: float,
        wait_seconds: float,
        owner: str | None = None,
        take_over_from: str | None = None,
    ) -> Turn:
        """Take the conversation (waiting up to `wait_seconds` for a turn in
        progress) and read its state. An unknown id starts a new conversation.
        Raises StoreError when it belongs to another app or user, or stays busy.
        `owner`: the lease's token (a new one when None); `take_over_from`: a
        token whose lease is taken at once, live or not (the same turn's earlier
        attempt, resumed by whoever holds its run now)."""

    @abstractmethod
    def record_run(self, run: RunRecord) -> None:
        """Write a workflow-mode run (no conversation) in one transaction."""

    @abstractmethod
    def save_checkpoint(
        self,
        checkpoint: CheckpointRecord,
        run: RunRecord | None = None,
        nodes: Sequence[NodeExecutionRecord] = (),
        *,
        writer: str | None = None,
        journal: bool = False,
    ) -> None:
        """Write an unfinished run's checkpoint (replacing its last one; its `parts`
        are added to those written before), with `run` its run row (and the node
        executions in it), and `nodes`, in one transaction. Refused (StoreError)
        when the run has ended or another writer holds its checkpoint. `writer`:
        who writes it (a pause lets the run go, so its record names no owner, but
        the row it replaces is this writer's); None: the record's owner.
        `journal`: a running run's checkpoint that may be made durable in the
        run's journal and reach the tables a moment later (`store.run_journal`;
        a store without journals writes it at once)."""

    @abstractmethod
    def checkpoint(self, run_id: str, *, whole: bool = True) -> CheckpointRecord | None:
        """The unfinished run's checkpoint; not `whole`: its row alone (head, status,
        holder), without its parts and the node executions holding outputs."""

    @abstractmethod
    def checkpoints(self, status: str | None = None) -> list[CheckpointRecord]:
        """The unfinished runs' checkpoints (of one status), the oldest first."""

    @abstractmethod
    def checkpoint_of_task(self, task_id: str) -> CheckpointRecord | None:
        """The checkpoint of the unfinished run of task `task_id` (without its
        parts), None when there is none: a stop names the task, not the run."""

    @abstractmethod
    def claim_checkpoint(
        self,
        run_id: str,
        *,
        owner: str,
        lease_seconds: float,
        statuses: Sequence[str],
        take_over: bool = False,
    ) -> CheckpointRecord | None:
        """Take a run to resume it: its checkpoint when its status is one of
        `statuses` and nobody holds an unexpired lease on it (then it is `running`,
        held by `owner`, its attempts counted); None otherwise. Atomic across processes.
        `take_over`: whoever holds it now has lost it (a broker says so)."""

    @abstractmethod
    def delete_checkpoint(self, run_id: str) -> None: ...

    @abstractmethod
    def messages(self, conversation_id: str) -> list[MessageRecord]:
        """Every message of a conversation, oldest first."""

    @abstractmethod
    def message_page(
        self, conversation_id: str, *, before_id: str | None, limit: int
    ) -> tuple[list[MessageRecord], bool]:
        """Up to `limit` messages older than `before_id` (the newest when None), oldest
        first, and whether older ones remain. KeyError when `before_id` is unknown."""

    @abstractmethod
    def conversation(self, conversation_id: str) -> ConversationRecord | None: ...

    @abstractmethod
    def conversations(
        self,
        *,
        app_id: str,
        user_id: str,
        after_id: str | None,
        limit: int,
        sort_by: str = "-updated_at",
    ) -> tuple[list[ConversationRecord], bool]:
        """A page of a user's conversations in `sort_by` order (`[-]created_at`,
        `[-]updated_at`) after `after_id`, and whether more remain. KeyError when
        `after_id` is not one of theirs."""

    @abstractmethod
    def delete_conversation(self, conversation_id: str, *, app_id: str, user_id: str) -> bool:
        """Delete a conversation with its messages and runs; False when it is not theirs."""

    @abstractmethod
    def variables(self, conversation_id: str) -> dict[str, VariableValue]: ...

    @abstractmethod
    def set_variable(self, conversation_id: str, name: str, value: VariableValue) -> None:
        """Write one conversation variable (an update through the API)."""

    @abstractmethod
    def rename_conversation(self, conversation_id: str, name: str) -> None: ...

    @abstractmethod
    def message(self, message_id: str) -> MessageRecord | None: ...

    @abstractmethod
    def feedback(self, message_id: str) -> FeedbackRecord | None: ...

    @abstractmethod
    def ratings(self, message_ids: Sequence[str]) -> dict[str, str]:
        """The rating of each of these messages that has feedback."""

    @abstractmethod
    def set_feedback(self, feedback: FeedbackRecord) -> None:
        """Write (or replace) the feedback of `feedback.message_id`."""

    @abstractmethod
    def delete_feedback(self, message_id: str) -> bool: ...

    @abstractmethod
    def feedbacks(self, *, app_id: str, page: int, limit: int) -> list[FeedbackRecord]:
        """A page (from 1) of an app's feedbacks, the newest first."""

    @abstractmethod
    def run(self, run_id: str) -> RunRecord | None: ...

    @abstractmethod
    def record_timeline(self, run_id: str, events: Sequence[Mapping[str, Any]]) -> None:
        """Keep the timeline of a recorded run (its node events, each with its time
        `t`), replacing one kept before."""

    @abstractmethod
    def timeline(self, run_id: str) -> list[dict[str, Any]] | None:
        """The timeline kept for a run, or None."""

    @abstractmethod
    def run_page(
        self,
        *,
        app_id: str,
        status: str | None,
        keyword: str | None,
        created_after: float | None,
        created_before: float | None,
        page: int,
        limit: int,
    ) -> tuple[list[RunRecord], int]:
        """A page (from 1) of an app's workflow-mode runs, the newest first, without
        their node executions and files; and how many runs match in all. `keyword`
        is looked for, ignoring case, in the inputs, the outputs and the user."""

    @abstractmethod
    def recent_runs(self, *, status: str | None, limit: int) -> list[RunRecord]:
        """The newest runs of every app (running and paused ones included), the
        newest first, without their node executions and files."""

    @abstractmethod
    def users(self, app_id: str) -> set[str]:
        """Every end user the app has seen (runs, conversations, uploads)."""

    @abstractmethod
    def add_upload(self, upload: UploadRecord) -> None: ...

    @abstractmethod
    def upload(self, upload_id: str) -> UploadRecord | None: ...

    # ---- human-input forms

    @abstractmethod
    def add_form(self, form: FormRecord) -> None:
        """Keep a new (waiting) form; a token or id already kept is a StoreError."""

    @abstractmethod
    def form(self, token: str) -> FormRecord | None: ...

    @abstractmethod
    def close_form(
        self,
        token: str,
        *,
        status: str,
        now: float,
        action_id: str | None = None,
        submission: Mapping[str, Any] | None = None,
    ) -> bool:
        """Close a waiting form, atomically across processes: True for the one
        caller that closed it. A submit (`FORM_SUBMITTED`) closes only a form
        whose deadline is after `now`; a timeout only one whose deadline is not."""

    @abstractmethod
    def due_forms(self, now: float, limit: int = 100) -> list[FormRecord]:
        """Waiting forms whose deadline is at or before `now`, the oldest first."""

    @abstractmethod
    def run_forms(self, workflow_run_id: str) -> list[FormRecord]:
        """The forms of one run, oldest first."""

    @abstractmethod
    def note_form_source(self, workflow_run_id: str, source: str) -> None:
        """Note where the run of these forms came from (`FormRecord.source`)."""

    @abstractmethod
    def close(self) -> None: ...
