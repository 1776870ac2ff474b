"""Located, translatable DSL problems, and the one error that carries them all."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firstgate.common.dsl import shown
from firstgate.locales.localized_error import LocalizedError
from pydantic import ValidationError

from firstgate import locales

# Pydantic's own error types -> our message keys (custom validators already use ours).
_BUILTIN_KEYS = {
    "missing": "dsl.field.missing",
    "bool_type": "dsl.field.bool",
    "bool_parsing": "dsl.field.bool",
    "string_type": "dsl.field.string",
    "string_too_short": "dsl.field.empty",
    "int_type": "dsl.field.int",
    "int_parsing": "dsl.field.int",
    "list_type": "dsl.field.list",
    "dict_type": "dsl.field.object",
    "model_type": "dsl.field.object",
    "model_attributes_type": "dsl.field.object",
    "literal_error": "dsl.choice",
    "extra_forbidden": "dsl.settings.unknownKey",
}

# The values in pydantic's `literal_error` context, each repr()-quoted.
_QUOTED = re.compile(r"'([^']*)'")


def _choices(expected: str) -> str:
    """pydantic's `'a', 'b' or 'c'` (English) as `a, b, c` for any locale."""
    return ", ".join(_QUOTED.findall(expected)) or expected


@dataclass(frozen=True, slots=True)
class NodeRef:
    id: str
    title: str
    type: str


@dataclass(frozen=True, slots=True)
class SourcePlace:
    """A position in a file: line and column count from 1."""

    path: str
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a workflow file, located as precisely as we can."""

    message_key: str
    params: dict[str, Any] = field(default_factory=dict)
    node: NodeRef | None = None
    field: str | None = None
    place: SourcePlace | None = None

    def render(self, locale: str | None = None) -> str:
        """`FILE, line L, column C: node ID "TITLE" (TYPE): FIELD what is wrong`, each
        part there when known."""
        detail = locales.t(self.message_key, locale, **self.params)
        if self.field:
            detail = f"{self.field} {detail}"
        parts: list[str] = []
        if self.place is not None:
            parts.append(
                locales.t(
                    "dsl.location.file",
                    locale,
                    path=self.place.path,
                    line=self.place.line,
                    column=self.place.column,
                )
            )
        if self.node is not None:
            parts.append(
                locales.t(
                    "dsl.location.node",
                    locale,
                    id=self.node.id,
                    title=self.node.title,
                    type=self.node.type,
                )
            )
        return ": ".join([*parts, detail])

    def __str__(self) -> str:
        return self.render()


class DslError(LocalizedError):
    """The workflow file cannot run; `problems` lists every reason at once."""

    message_key = "dsl.invalid"

    def __init__(self, problems: Sequence[Problem], *, source: str | Path | None = None) -> None:
        self.problems = list(problems)
        # The file the problems are in (a workflow file, a models file), when known.
        self.source = str(source) if source is not None else None
        super().__init__(count=len(self.problems))

    def render(self, locale: str | None = None) -> str:
        return "\n".join(p.render(locale) for p in self.problems)


def field_path(loc: Iterable[str | int]) -> str:
    """('retry_config', 'max_retries') -> retry_config.max_retries; list indexes in brackets."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not part.startswith(("function-", "function_")) and part not in ("list[...]",):
            path += f".{part}" if path else part
    return path


def _loc(loc: tuple[Any, ...]) -> tuple[str | int, ...]:
    # Pydantic inserts union/validator tags (e.g. 'list[PromptMessage]', 'function-before[...]').
    return tuple(p for p in loc if isinstance(p, int) or ("[" not in p and "(" not in p))


def problems_from_validation(
    error: ValidationError, node: NodeRef | None = None, prefix: str = ""
) -> list[Problem]:
    found: list[Problem] = []
    seen: set[str] = set()
    for item in error.errors(include_url=False):
        path = field_path(_loc(item["loc"]))
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        kind = item["type"]
        ctx = dict(item.get("ctx") or {})
        if kind.startswith("dsl."):
            problem = Problem(kind, ctx, node, path or None)
        elif kind in _BUILTIN_KEYS:
            params = {"got": shown(item.get("input"))}
            if kind == "literal_error":
                params["choices"] = _choices(str(ctx.get("expected", "")))
            problem = Problem(_BUILTIN_KEYS[kind], params, node, path or None)
        else:
            problem = Problem("dsl.field.invalid", {"detail": item["msg"]}, node, path or None)
        # Unions report the same path once per alternative; one line is enough.
        if path in seen:
            continue
        seen.add(path)
        found.append(problem)
    return found
