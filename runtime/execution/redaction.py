"""Keeping secrets out of everything a run shows: events, the terminal, the store.

The secrets are the values of the workflow's `secret` environment variables.
Every event the engine yields, every line the CLI prints and every record the
store keeps passes through a `Redactor`. The rule itself (which echoed forms of
a secret are removed, what replaces them, how short a secret may be) is the
floor's, `common.redaction`: one rule for credentials and secrets alike. What
is the runtime's here: the secrets are the environment's, and values (dicts,
lists) are walked.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from firstgate.common.redaction import Redactor as TextRedactor


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._text = TextRedactor(secrets)

    def __bool__(self) -> bool:
        return bool(self._text.secrets)

    def text(self, value: str) -> str:
        return self._text.redact(value)

    def value(self, value: Any) -> Any:
        """`value` with every string in it redacted (dicts, lists and tuples walked)."""
        if not self:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


class StreamRedaction:
    """Streamed texts (an answer as it streams, chunk by chunk), redacted across
    chunk boundaries: a secret the model sends three characters at a time is
    masked whole. Each stream is held apart by its key; `flush` when it ends."""

    def __init__(self, redactor: Redactor) -> None:
        self._text = redactor._text
        self._held: dict[Hashable, str] = {}

    def feed(self, key: Hashable, text: str) -> str:
        """What of `text` may go out now (redacted)."""
        if not self._text.secrets:
            return text
        out, self._held[key] = self._text.redact_stream(self._held.pop(key, ""), text)
        return out

    def flush(self, key: Hashable) -> str:
        """What the stream held back, redacted: its last characters."""
        return self._text.redact(self._held.pop(key, ""))

    def holding(self) -> list[Hashable]:
        """The streams that still hold text back, in the order they began to."""
        return [key for key, text in self._held.items() if text]


NO_SECRETS = Redactor()
