"""Node outputs and the run's namespaces, addressed by selectors like ("llm1", "text").

Namespaces besides node ids: `sys` (Dify's system variables), `env`
(environment variables), `conversation` (the conversation's variables, typed)
and `userinput` (newer editors' name for the user's query and files). Deeper
selector parts index into objects, and into files by attribute
(`{{#start.doc.name#}}`). Older exports name a system variable through the
start node, as Dify's start node outputs them: `[start_id, "sys.query"]` is
`sys.query`.

A container's rounds read and write through *scopes*: `child()` is a layer
over its parent holding what exists only in that scope (a round's node
outputs and the container's `item`/`index`; a loop's variables for all its
rounds). A read looks in the innermost layer first, then outwards; a write
goes to the layer that holds the name (conversation variables to the run's,
loop variables to their loop's), so the same node running in ten parallel
rounds writes ten different layers, and what a round writes outside it is
seen after the container ends.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from firstgate.common.files import File
from firstgate.nodes.selectors import Selector

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
        self._parent: VariablePool | None = None
        self._values: dict[str, dict[str, Any]] = {
            "sys": dict(system),
            "env": dict(environment or {}),
            "conversation": dict(conversation or {}),
        }
        # Declared types by (head, name): conversation variables, loop variables.
        self._types: dict[tuple[str, str], str] = {
            ("conversation", name): kind for name, kind in (conversation_types or {}).items()
        }
        self._writes: dict[str, int] = {}  # head -> how many `set`s it has seen

    def child(
        self,
        values: Mapping[str, Mapping[str, Any]] | None = None,
        types: Mapping[tuple[str, str], str] | None = None,
    ) -> VariablePool:
        """A scope over this one (see the module's docstring), starting with `values`
        (head -> names -> values) and their declared `types`."""
        scope = VariablePool.__new__(VariablePool)
        scope._lock = self._lock  # one lock for the whole tree: reads walk it
        scope._start_id = self._start_id
        scope._parent = self
        scope._values = {head: dict(names) for head, names in (values or {}).items()}
        scope._types = dict(types or {})
        scope._writes = {}
        return scope

    def layer(self) -> dict[str, dict[str, Any]]:
        """This layer's own values (head -> names -> values), for a checkpoint."""
        with self._lock:
            return {head: dict(names) for head, names in self._values.items()}

    def own(self, head: str) -> dict[str, Any] | None:
        """What this layer itself holds under `head` (not its parents), as it is:
        a checkpoint reads it on the dispatcher, where nothing writes meanwhile."""
        return self._values.get(head)

    def restore_layer(self, values: Mapping[str, Mapping[str, Any]]) -> None:
        """This layer's values as `layer()` gave them (a run resumed from its checkpoint)."""
        with self._lock:
            self._values = {head: dict(names) for head, names in values.items()}
            self._writes = {
                head: self._writes.get(head, 0) + 1 for head in {*self._writes, *values}
            }

    def _holder(self, head: str) -> VariablePool:
        """The innermost layer holding `head` (the outermost when none does). Under the lock."""
        layer: VariablePool | None = self
        outermost = self
        while layer is not None:
            if head in layer._values:
                return layer
            outermost = layer
            layer = layer._parent
        return outermost

    def set_outputs(self, node_id: str, outputs: Mapping[str, Any]) -> None:
        """A node's outputs, in this scope."""
        with self._lock:
            self._values[node_id] = dict(outputs)

    def outputs(self, node_id: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._holder(node_id)._values.get(node_id)
            return dict(found) if found is not None else None

    def has(self, selector: Selector) -> bool:
        head, name = self._canonical(selector)[:2]
        with self._lock:
            found = self._holder(head)._values.get(head)
            return found is not None and name in found

    def set(self, selector: Selector, value: Any) -> None:
        """Write one variable (an assigner's update) where it lives."""
        head, name = self._canonical(selector)[:2]
        with self._lock:
            holder = self._holder(head)
            holder._values.setdefault(head, {})[name] = value
            holder._writes[head] = holder._writes.get(head, 0) + 1

    def writes(self, head: str) -> int:
        """How many writes this layer's `head` has seen (`set`, `restore_layer`): a
        checkpoint encodes `sys` and `conversation` again only when they changed."""
        return self._writes.get(head, 0)

    def conversation(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._holder("conversation")._values["conversation"])

    def value_type(self, selector: Selector) -> str | None:
        """The declared type of a conversation or loop variable (None for anything else)."""
        if len(selector) != 2:
            return None
        key = (selector[0], selector[1])
        with self._lock:
            layer: VariablePool | None = self
            while layer is not None:
                if key in layer._types:
                    return layer._types[key]
                layer = layer._parent
        return None

    def _canonical(self, selector: Selector) -> Selector:
        if selector and selector[0] == USER_INPUT:
            return ("sys", *selector[1:])
        return start_sys_alias(selector, self._start_id) or selector

    def get(self, selector: Selector) -> Any:
        """The value at `selector`; None when unset."""
        path = self._canonical(selector)
        head = path[0]
        with self._lock:
            layer: VariablePool | None = self
            value: Any = None
            while layer is not None:
                value = layer._values.get(head)
                if value is not None:
                    break
                layer = layer._parent
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
