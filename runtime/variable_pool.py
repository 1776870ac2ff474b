"""Node outputs and the run's namespaces, addressed by selectors like ("llm1", "text").

Namespaces besides node ids: `sys` (Dify's system variables), `env`
(environment variables), `conversation` (the conversation's variables, typed)
and `userinput` (newer editors' name for the user's query and files). Deeper
selector parts index into objects, and into files by attribute
(`{{#start.doc.name#}}`). Older exports name a system variable through the
start node, as Dify's start node outputs them: `[start_id, "sys.query"]` is
`sys.query`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from nodes.files import File
from nodes.selectors import Selector

# Dify's system variables of a chatflow; a workflow has all but the chat ones.
SYS_VARIABLES = frozenset(
    {
        "query",
        "files",
        "conversation_id",
        "dialogue_count",
        "user_id",
        "app_id",
        "workflow_id",
        "workflow_run_id",
    }
)
CHAT_ONLY_SYS_VARIABLES = frozenset({"query", "conversation_id", "dialogue_count"})
# `userinput.query` / `userinput.files` are `sys.query` / `sys.files`.
USER_INPUT = "userinput"
USER_INPUT_VARIABLES = frozenset({"query", "files"})
NAMESPACES = frozenset({"sys", "env", "conversation", USER_INPUT})


class VariablePool:
    def __init__(
        self,
        system: Mapping[str, Any],
        environment: Mapping[str, Any] | None = None,
        conversation: Mapping[str, Any] | None = None,
        conversation_types: Mapping[str, str] | None = None,
        start_id: str | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._start_id = start_id
        self._values: dict[str, dict[str, Any]] = {
            "sys": dict(system),
            "env": dict(environment or {}),
            "conversation": dict(conversation or {}),
        }
        self._conversation_types = dict(conversation_types or {})

    def set_outputs(self, node_id: str, outputs: Mapping[str, Any]) -> None:
        with self._lock:
            self._values[node_id] = dict(outputs)

    def outputs(self, node_id: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._values.get(node_id)
            return dict(found) if found is not None else None

    def has(self, selector: Selector) -> bool:
        with self._lock:
            found = self._values.get(self._canonical(selector)[0])
            return found is not None and self._canonical(selector)[1] in found

    def set(self, selector: Selector, value: Any) -> None:
        """Write one variable (an assigner's update)."""
        head, name = self._canonical(selector)[:2]
        with self._lock:
            self._values.setdefault(head, {})[name] = value

    def conversation(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._values["conversation"])

    def value_type(self, selector: Selector) -> str | None:
        """The declared type of a conversation variable (None for anything else)."""
        if selector[0] == "conversation" and len(selector) == 2:
            return self._conversation_types.get(selector[1])
        return None

    def _canonical(self, selector: Selector) -> Selector:
        if selector and selector[0] == USER_INPUT:
            return ("sys", *selector[1:])
        return start_sys_alias(selector, self._start_id) or selector

    def get(self, selector: Selector) -> Any:
        """The value at `selector`; None when unset."""
        path = self._canonical(selector)
        with self._lock:
            value: Any = self._values.get(path[0])
        for part in path[1:]:
            if isinstance(value, File):
                value = value.attribute(part)
            elif isinstance(value, Mapping):
                value = value.get(part)
            else:
                return None
        return value


def start_sys_alias(selector: Selector, start_id: str | None) -> Selector | None:
    """`[start_id, "sys.query", ...]` as `("sys", "query", ...)`; None for any other selector."""
    if start_id is not None and len(selector) >= 2 and selector[0] == start_id:
        prefix, dot, name = selector[1].partition(".")
        if prefix == "sys" and dot and name:
            return ("sys", name, *selector[2:])
    return None
