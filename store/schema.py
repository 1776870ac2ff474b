"""The store's tables, written once for every SQL dialect.

Numbered migrations (they only ever append: see `store.relational`), with
`{real}` and `{integer}` where the dialects name a column type differently.
"""

from __future__ import annotations

_TEMPLATES: tuple[str, ...] = (
    # 1: conversations, their variables and messages; runs and node executions; files; leases.
    """
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        app_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        mode TEXT NOT NULL,
        dialogue_count {integer} NOT NULL DEFAULT 0,
        created_at {real} NOT NULL,
        updated_at {real} NOT NULL
    );
    CREATE TABLE conversation_variables (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        value_type TEXT NOT NULL,
        value TEXT NOT NULL,
        updated_at {real} NOT NULL,
        PRIMARY KEY (conversation_id, name)
    );
    CREATE TABLE workflow_runs (
        id TEXT PRIMARY KEY,
        app_id TEXT NOT NULL,
        workflow_id TEXT NOT NULL,
        mode TEXT NOT NULL,
        user_id TEXT NOT NULL,
        conversation_id TEXT REFERENCES conversations(id) ON DELETE CASCADE,
        status TEXT NOT NULL,
        inputs TEXT NOT NULL,
        outputs TEXT NOT NULL,
        error TEXT,
        elapsed_time {real} NOT NULL,
        total_tokens {integer} NOT NULL,
        total_steps {integer} NOT NULL,
        exceptions_count {integer} NOT NULL,
        created_at {real} NOT NULL,
        finished_at {real} NOT NULL
    );
    CREATE TABLE node_executions (
        id TEXT PRIMARY KEY,
        workflow_run_id TEXT NOT NULL REFERENCES workflow_runs(id) ON DELETE CASCADE,
        idx {integer} NOT NULL,
        node_id TEXT NOT NULL,
        node_type TEXT NOT NULL,
        title TEXT NOT NULL,
        predecessor_node_id TEXT,
        status TEXT NOT NULL,
        inputs TEXT NOT NULL,
        process_data TEXT NOT NULL,
        outputs TEXT NOT NULL,
        error TEXT,
        elapsed_time {real} NOT NULL,
        execution_metadata TEXT NOT NULL,
        created_at {real} NOT NULL,
        finished_at {real} NOT NULL
    );
    CREATE INDEX node_executions_run ON node_executions(workflow_run_id, idx);
    CREATE TABLE messages (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        seq {integer} NOT NULL,
        workflow_run_id TEXT NOT NULL REFERENCES workflow_runs(id),
        query TEXT NOT NULL,
        answer TEXT NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        total_tokens {integer} NOT NULL,
        created_at {real} NOT NULL,
        UNIQUE (conversation_id, seq)
    );
    CREATE TABLE files (
        id TEXT NOT NULL,
        workflow_run_id TEXT NOT NULL REFERENCES workflow_runs(id) ON DELETE CASCADE,
        variable TEXT NOT NULL,
        belongs_to TEXT NOT NULL,
        filename TEXT NOT NULL,
        extension TEXT NOT NULL,
        mime_type TEXT NOT NULL,
        size {integer} NOT NULL,
        transfer_method TEXT NOT NULL,
        remote_url TEXT,
        path TEXT,
        PRIMARY KEY (workflow_run_id, id)
    );
    CREATE TABLE conversation_leases (
        conversation_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at {real} NOT NULL
    );
    """,
    # 2: what the Service API lists and serves: conversation names and inputs; uploads.
    """
    ALTER TABLE conversations ADD COLUMN name TEXT NOT NULL DEFAULT '';
    ALTER TABLE conversations ADD COLUMN inputs TEXT NOT NULL DEFAULT '{}';
    CREATE INDEX conversations_owner ON conversations(app_id, user_id, updated_at);
    CREATE TABLE uploads (
        id TEXT PRIMARY KEY,
        app_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        name TEXT NOT NULL,
        size {integer} NOT NULL,
        extension TEXT NOT NULL,
        mime_type TEXT NOT NULL,
        path TEXT NOT NULL,
        created_at {real} NOT NULL
    );
    """,
    # 3: end users' feedback on messages (`POST /v1/messages/{id}/feedbacks`).
    """
    CREATE TABLE message_feedbacks (
        message_id TEXT PRIMARY KEY,
        app_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        rating TEXT NOT NULL,
        content TEXT,
        created_at {real} NOT NULL,
        updated_at {real} NOT NULL
    );
    CREATE INDEX message_feedbacks_app ON message_feedbacks(app_id, updated_at);
    """,
    # 4: how each run was started (Dify's `triggered_from`: app-run, webhook, schedule).
    """
    ALTER TABLE workflow_runs ADD COLUMN triggered_from TEXT NOT NULL DEFAULT 'app-run';
    """,
    # 5: runs that live on their own: each unfinished run's latest checkpoint
    # (`runtime/execution/checkpoint.py`'s snapshot, as JSON text) and who holds it.
    """
    CREATE TABLE run_checkpoints (
        run_id TEXT PRIMARY KEY,
        app_id TEXT NOT NULL,
        workflow_id TEXT NOT NULL,
        graph_hash TEXT NOT NULL,
        status TEXT NOT NULL,
        version {integer} NOT NULL,
        position {integer} NOT NULL,
        snapshot TEXT NOT NULL,
        owner TEXT,
        lease_expires_at {real},
        attempts {integer} NOT NULL DEFAULT 0,
        created_at {real} NOT NULL,
        updated_at {real} NOT NULL
    );
    CREATE INDEX run_checkpoints_status ON run_checkpoints(status, updated_at);
    CREATE TABLE run_checkpoint_parts (
        run_id TEXT NOT NULL REFERENCES run_checkpoints(run_id) ON DELETE CASCADE,
        part TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (run_id, part)
    );
    """,
    # 6: human-input forms a paused run waits on (`GET`/`POST /form/human_input/{token}`).
    """
    CREATE TABLE human_input_forms (
        id TEXT PRIMARY KEY,
        token TEXT NOT NULL UNIQUE,
        app_id TEXT NOT NULL,
        workflow_run_id TEXT NOT NULL,
        node_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        definition TEXT NOT NULL,
        status TEXT NOT NULL,
        expires_at {real} NOT NULL,
        created_at {real} NOT NULL,
        action_id TEXT,
        submission TEXT,
        closed_at {real},
        source TEXT
    );
    CREATE INDEX human_input_forms_due ON human_input_forms(status, expires_at);
    CREATE INDEX human_input_forms_run ON human_input_forms(workflow_run_id);
    """,
    # 7: a run's timeline (when each node event happened, what it said), for the console.
    """
    CREATE TABLE run_timelines (
        workflow_run_id TEXT PRIMARY KEY REFERENCES workflow_runs(id) ON DELETE CASCADE,
        events TEXT NOT NULL,
        created_at {real} NOT NULL
    );
    """,
    # 8: a per-node checkpoint writes a node's execution and its head, nothing more.
    # A node execution that holds its node's checkpoint outputs says so
    # (`checkpoint_outputs`), instead of a part row naming it; the index on the
    # checkpoints' status and update time, rewritten by every commit, goes (the
    # table holds unfinished runs only: start-up reads it whole). A checkpoint
    # knows its run's task id (a stop names the task), written once.
    """
    ALTER TABLE node_executions ADD COLUMN checkpoint_outputs {integer} NOT NULL DEFAULT 0;
    DROP INDEX run_checkpoints_status;
    ALTER TABLE run_checkpoints ADD COLUMN task_id TEXT;
    CREATE INDEX run_checkpoints_task ON run_checkpoints(task_id);
    """,
)


def migrations(*, real: str, integer: str) -> tuple[str, ...]:
    """The migrations in one dialect's column types."""
    return tuple(t.replace("{real}", real).replace("{integer}", integer) for t in _TEMPLATES)
