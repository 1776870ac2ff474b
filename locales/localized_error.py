"""The one shape of an error people read: a message key plus its parameters.

Every layer raises these (the transport's `FirstGateError`, the nodes'
`NodeRunError`, the runtime's `RouteError`, `LimitExceededError`, `DslError`,
the CLI's bad-argument error), so a front end renders any of them in any
locale with `error.render(locale)`. `str(error)` is the en-US text, built once
from the same catalog: the English lives in `en-US.json`, never twice.
"""

from __future__ import annotations

from typing import Any

from firstgate.locales import t


class LocalizedError(Exception):
    """An error with a `message_key` (a class default, or given) and `params`."""

    message_key: str = ""

    def __init__(self, message_key: str | None = None, /, **params: Any) -> None:
        if message_key:
            self.message_key = message_key
        self.params: dict[str, Any] = params
        super().__init__(self.render())

    def render(self, locale: str | None = None) -> str:
        """The message in `locale` (en-US when None), per key falling back to en-US."""
        return t(self.message_key, locale, **self.params)

    @property
    def error_type(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"
