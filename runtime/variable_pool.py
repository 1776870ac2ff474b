"""Node outputs and system variables, addressed by selectors like ("llm1", "text")."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from nodes.selectors import Selector

SYS_VARIABLES = frozenset(
    {
        "query",
        "files",
        "workflow_run_id",
        "user_id",
        "app_id",
        "workflow_id",
        "conversation_id",
        "dialogue_count",
    }
)


class VariablePool:
    def __init__(
        self, system: Mapping[str, Any], environment: Mapping[str, Any] | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[str, Any]] = {
            "sys": dict(system),
            "env": dict(environment or {}),
        }

    def set_outputs(self, node_id: str, outputs: Mapping[str, Any]) -> None:
        with self._lock:
            self._values[node_id] = dict(outputs)

    def outputs(self, node_id: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._values.get(node_id)
            return dict(found) if found is not None else None

    def get(self, selector: Selector) -> Any:
        """The value at `selector`; deeper parts index into objects. None when unset."""
        with self._lock:
            value: Any = self._values.get(selector[0])
        for part in selector[1:]:
            if not isinstance(value, Mapping):
                return None
            value = value.get(part)
        return value
