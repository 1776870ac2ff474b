"""`POST /v1/completion-messages`: a completion app (a text generator) answers
as Dify's completion apps do.

The app runs as the workflow it was compiled into (`runtime.app_modes`); its
events are translated on the way out: each `text_chunk` is a `message`
(`answer`), the run's end is `message_end` (`metadata.usage`, and the
retrieved knowledge in `metadata.retriever_resources` when the app shows it)
or `error`; node and workflow events are not part of a completion app's
stream. The message id is the run's id. The blocking reply is Dify's
completion shape (`event`, `task_id`, `id`, `message_id`, `mode`, `answer`,
`metadata`, `created_at`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from firstgate.nodes.retriever_resources import from_context
from firstgate.runtime.execution.events import llm_usage
from firstgate.serve.bodies import WorkflowRunBody
from firstgate.serve.errors import ApiError

if TYPE_CHECKING:
    from firstgate.runtime.dsl.app_modes import EasyApp
    from firstgate.serve.runs import RunHandle

COMPLETION_MODE = "completion"
# A run's end statuses that end the message (a stopped run keeps what it streamed).
_ANSWERED = ("succeeded", "partial-succeeded", "stopped")
_TOKEN_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


class CompletionBody(WorkflowRunBody):
    # Dify's completion apps take the text in their inputs; a `query` is accepted.
    query: str = ""


def not_completion_app() -> ApiError:
    return ApiError(400, "app_unavailable", "serve.error.notCompletionApp")


@dataclass(slots=True)
class CompletionReply:
    """One completion run's events, as Dify's completion app sends them."""

    handle: RunHandle
    easy: EasyApp | None
    started: float = field(default_factory=time.monotonic)
    created_at: int = field(default_factory=lambda: int(time.time()))
    answer: list[str] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=dict)
    resources: list[dict[str, Any]] = field(default_factory=list)

    @property
    def message_id(self) -> str:
        return self.handle.workflow_run_id

    def _envelope(self, name: str) -> dict[str, Any]:
        return {
            "event": name,
            "task_id": self.handle.task_id,
            "id": self.message_id,
            "message_id": self.message_id,
            "created_at": self.created_at,
        }

    def translate(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The completion events (none, or one) one workflow event makes."""
        name = event.get("event")
        data = event.get("data") or {}
        if name == "workflow_started":
            self.created_at = int(data.get("created_at") or self.created_at)
        elif name == "text_chunk":
            text = str(data.get("text", ""))
            self.answer.append(text)
            return [{**self._envelope("message"), "answer": text}]
        elif name == "node_finished":
            self._node_finished(data)
        elif name == "workflow_finished":
            return [self._end(data)]
        return []

    def _node_finished(self, data: dict[str, Any]) -> None:
        outputs = data.get("outputs") or {}
        usage = outputs.get("usage") if isinstance(outputs, dict) else None
        if isinstance(usage, dict):
            for key in _TOKEN_KEYS:
                self.tokens[key] = self.tokens.get(key, 0) + int(usage.get(key) or 0)
        easy = self.easy
        if easy is not None and easy.shows_retriever_resources:
            if data.get("node_id") == easy.knowledge_node and isinstance(outputs, dict):
                found = from_context(outputs.get("result"))
                self.resources += [
                    {**r, "position": len(self.resources) + i} for i, r in enumerate(found, 1)
                ]

    def _end(self, data: dict[str, Any]) -> dict[str, Any]:
        if data.get("status") in _ANSWERED:
            return {**self._envelope("message_end"), "metadata": self.metadata(), "files": []}
        return {
            **self._envelope("error"),
            "status": 400,
            "code": "completion_request_error",
            "message": f"Run failed: {data.get('error') or ''}",
        }

    def metadata(self) -> dict[str, Any]:
        latency = round(time.monotonic() - self.started, 6)
        return {
            "usage": llm_usage(self.tokens, latency=latency),
            "retriever_resources": self.resources,
        }

    def frames(self, raw: bytes) -> list[bytes]:
        """One published event (JSON text) as the completion frames it makes."""
        return [json.dumps(e).encode() for e in self.translate(json.loads(raw))]

    def blocking(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        """Dify's blocking completion reply, from every event of the run."""
        ended: dict[str, Any] | None = None
        for event in events:
            for made in self.translate(event):
                if made["event"] in ("message_end", "error"):
                    ended = made
        if ended is None or ended["event"] == "error":
            error = "" if ended is None else str(ended.get("message", ""))
            raise ApiError(400, "completion_request_error", "serve.error.runFailed", error=error)
        return {
            "event": "message",
            "task_id": self.handle.task_id,
            "id": self.message_id,
            "message_id": self.message_id,
            "mode": COMPLETION_MODE,
            "answer": "".join(self.answer),
            "metadata": ended["metadata"],
            "created_at": self.created_at,
        }
