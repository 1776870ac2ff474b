"""The one cap on rendered text, checked while the text is built.

Every text a workflow renders (an answer, an end node's stream, an LLM
prompt, a template's output, a `{{#node.var#}}` substitution in any field)
grows through a `TextBuilder`, which refuses the piece that would take it past
`MAX_RENDERED_CHARS`: an answer of 3,000 references to a 1 MB value fails
after about 400 KB, not after building 3 GB. A single value's text is made
before it is counted, so the most a render holds is the cap plus one value
(values are bounded where they are made: model replies, templates, files).

The cap is Dify's limit for a template's output (`TEMPLATE_TRANSFORM_MAX_LENGTH`,
400,000 characters); `FIRSTGATE_MAX_RENDERED_CHARS` changes it for the process.
Dify puts no such cap on an LLM prompt: that one is built against its route's
`max_prompt_bytes` instead (`nodes.llm_prompt.PromptBudget`, a `TextBudget`
that counts UTF-8 bytes).
"""

from __future__ import annotations

import os

from firstgate.locales.localized_error import LocalizedError

DEFAULT_MAX_RENDERED_CHARS = 400_000


def _configured() -> int:
    raw = os.environ.get("FIRSTGATE_MAX_RENDERED_CHARS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return DEFAULT_MAX_RENDERED_CHARS


MAX_RENDERED_CHARS = _configured()


class RenderedTooLongError(LocalizedError):
    """A rendered text would pass the cap; `size` is where it stopped."""

    message_key = "dsl.node.templateTooLong"


def too_long(size: int, limit: int = MAX_RENDERED_CHARS) -> RenderedTooLongError:
    return RenderedTooLongError(size=size, limit=limit)


class TextBudget:
    """Characters rendered so far against the cap; several texts may share one
    (the messages of one prompt are capped together)."""

    __slots__ = ("size", "limit")

    def __init__(self, limit: int = MAX_RENDERED_CHARS) -> None:
        self.size = 0
        self.limit = limit

    def charge(self, characters: int) -> None:
        self.size += characters
        if self.size > self.limit:
            raise too_long(self.size, self.limit)

    def charge_text(self, piece: str) -> None:
        """Charges `piece` (a budget of another unit, e.g. an LLM prompt's bytes, counts it so)."""
        self.charge(len(piece))


class TextBuilder:
    """A text built piece by piece, each piece charged to a budget before it is kept."""

    __slots__ = ("_parts", "budget")

    def __init__(self, budget: TextBudget | None = None) -> None:
        self._parts: list[str] = []
        self.budget = budget if budget is not None else TextBudget()

    def add(self, piece: str) -> None:
        """Appends `piece`; raises RenderedTooLongError instead of passing the cap."""
        self.budget.charge_text(piece)
        self._parts.append(piece)

    def text(self) -> str:
        return "".join(self._parts)
