"""An agent-chat app's stream as Dify's agent apps send it on
`POST /v1/chat-messages`.

The app runs as the chatflow it was compiled into (`runtime.dsl.app_modes`);
its events are translated on the way out, as Dify's agent runner and its
easy-UI task pipeline emit them:

- each round of the agent is one `agent_thought` (`id`, `position` from 1):
  once when the model has answered (its `thought`, the `tool` names joined by
  `;`, `tool_input` a JSON object of each tool's arguments), and again, same
  id and position, when the tools have run (`observation`, a JSON object of
  each tool's result, `message_files`); a round without tools (the answer) is
  reported once, after its text;
- each file a tool made is a `message_file` (`belongs_to: assistant`) between
  the two reports of its round;
- answer text is `agent_message` (not `message`); the end is `message_end`
  (`metadata.usage`, `metadata.retriever_resources`) or `error`.

Workflow, node and `agent_log` events are not part of an agent app's stream.
Dify refuses the blocking mode for agent apps (`invalid_param`); so does serve.
Every reader translates for itself (a stream may be read twice), so the ids
come from the run's own log ids, not from a counter here.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from firstgate.serve.errors import ApiError

if TYPE_CHECKING:
    from firstgate.serve.runs import RunHandle

AGENT_CHAT_MODE = "agent-chat"
ROUND = "ROUND "
THOUGHT = " Thought"
CALL = "CALL "
_PASSED = ("message_end", "error")


def blocking_refused() -> ApiError:
    """Dify's answer to a blocking request to an agent app."""
    return ApiError(400, "invalid_param", "serve.error.agentBlocking")


def _uuid(log_id: str) -> str:
    try:
        return str(uuid.UUID(hex=log_id))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_OID, log_id))


@dataclass(slots=True)
class _Thought:
    id: str
    position: int
    thought: str = ""
    tools: list[str] = field(default_factory=list)
    tool_input: dict[str, Any] = field(default_factory=dict)
    observation: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def shown(self) -> dict[str, Any]:
        """What the stream's `agent_thought` and a message's `agent_thoughts` share."""
        return {
            "id": self.id,
            "position": self.position,
            "thought": self.thought,
            "observation": _json(self.observation),
            "tool": ";".join(self.tools),
            # Dify falls back to the tool's name as its label in every language.
            "tool_labels": {t: {"en_US": t, "zh_Hans": t} for t in self.tools},
            "tool_input": _json(self.tool_input),
        }

    @classmethod
    def stored(cls, noted: dict[str, Any]) -> _Thought:
        """A round as the agent node keeps it in its process data."""
        return cls(
            _uuid(str(noted.get("id") or "")),
            int(noted.get("position") or 0),
            str(noted.get("thought") or ""),
            [str(t) for t in noted.get("tools") or []],
            dict(noted.get("tool_input") or {}),
            dict(noted.get("observation") or {}),
            [str(f) for f in noted.get("files") or []],
        )


def message_thoughts(
    process_data: list[dict[str, Any]], message_id: str, created_at: int
) -> list[dict[str, Any]]:
    """A message's `agent_thoughts` (`GET /v1/messages`), from its agent node's rounds."""
    found = []
    for data in process_data:
        for noted in data.get("agent_thoughts") or []:
            if isinstance(noted, dict):
                thought = _Thought.stored(noted)
                found.append(
                    {
                        **thought.shown(),
                        "chain_id": None,
                        "message_id": message_id,
                        "created_at": created_at,
                        "files": thought.files,
                    }
                )
    return found


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False) if value else ""


@dataclass(slots=True)
class AgentChatReply:
    """One agent-chat turn's events, as Dify's agent app sends them."""

    handle: RunHandle
    conversation_id: str = ""
    message_id: str = ""
    created_at: int = 0
    rounds: dict[str, _Thought] = field(default_factory=dict)  # by the round's log id

    def _envelope(self, name: str) -> dict[str, Any]:
        return {
            "event": name,
            "conversation_id": self.conversation_id,
            "message_id": self.message_id,
            "created_at": self.created_at,
            "task_id": self.handle.task_id,
        }

    def translate(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The agent app's events (none, one or more) one chatflow event makes."""
        name = event.get("event")
        if name == "workflow_started":
            data = event.get("data") or {}
            self.created_at = int(data.get("created_at") or self.created_at)
            self.conversation_id = str(event.get("conversation_id") or self.conversation_id)
            self.message_id = str(event.get("message_id") or self.message_id)
        elif name == "agent_log":
            return self._log(event.get("data") or {})
        elif name == "message":
            self._ids(event)
            envelope = self._envelope("agent_message")
            return [{**envelope, "id": self.message_id, "answer": str(event.get("answer", ""))}]
        elif name in _PASSED:
            self._ids(event)
            return [{**event, **self._envelope(str(name))}]
        return []

    def _ids(self, event: dict[str, Any]) -> None:
        self.conversation_id = str(event.get("conversation_id") or self.conversation_id)
        self.message_id = str(event.get("message_id") or self.message_id)
        self.created_at = int(event.get("created_at") or self.created_at)

    def _log(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        label = str(data.get("label") or "")
        status = data.get("status")
        log_id = str(data.get("id") or "")
        parent = self.rounds.get(str(data.get("parent_id") or ""))
        if data.get("parent_id") is None and label.startswith(ROUND):
            if status == "start":
                self.rounds[log_id] = _Thought(_uuid(log_id), len(self.rounds) + 1)
                return []
            done = self.rounds.get(log_id)
            if done is not None and done.tools:
                return [self._thought(done)]  # the tools' results
            return []
        if parent is None or status == "start":
            return []
        found = data.get("data") or {}
        if label.endswith(THOUGHT):
            parent.thought = str(found.get("output") or "")
            parent.tools = [str(t) for t in found.get("tool_calls") or []]
            given = found.get("tool_input")
            parent.tool_input = dict(given) if isinstance(given, dict) else {}
            return [self._thought(parent)]
        if label.startswith(CALL):
            tool = str(found.get("tool_call_name") or label[len(CALL) :])
            parent.observation[tool] = found.get("tool_response")
            return [self._file(f, parent) for f in found.get("files") or [] if isinstance(f, dict)]
        return []

    def _thought(self, thought: _Thought) -> dict[str, Any]:
        return {
            **self._envelope("agent_thought"),
            **thought.shown(),
            "message_files": list(thought.files),
        }

    def _file(self, file: dict[str, Any], thought: _Thought) -> dict[str, Any]:
        file_id = str(file.get("id") or "")
        thought.files.append(file_id)
        return {
            **self._envelope("message_file"),
            "id": file_id,
            "type": str(file.get("type") or "image"),
            "belongs_to": "assistant",
            "url": str(file.get("url") or ""),
        }

    def frames(self, raw: bytes) -> list[bytes]:
        """One published event (JSON text) as the agent app's frames."""
        return [json.dumps(e).encode() for e in self.translate(json.loads(raw))]
