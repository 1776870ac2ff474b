"""Keeping secrets out of everything a run shows: events, the terminal, errors.

The secrets are the values of the workflow's `secret` environment variables.
Every event the engine yields, and every line the CLI prints, passes through a
`Redactor`; the replacement rule itself is the transport's (`redact`), so there
is one rule for credentials and secrets alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from plugin_daemon_client.redaction import Redactor as _TransportRedactor


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first: a secret that contains another is replaced whole.
        self.secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
        self._rule = _TransportRedactor(self.secrets)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, value: str) -> str:
        return self._rule.redact(value) if self.secrets else value

    def value(self, value: Any) -> Any:
        """`value` with every string in it redacted (dicts, lists and tuples walked)."""
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


NO_SECRETS = Redactor()
