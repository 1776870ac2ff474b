"""Render errors for people: through `locales` when they carry a message key."""

from __future__ import annotations

import locales
from runtime.problems import DslError


def render_error(error: BaseException | None, locale: str | None, fallback: str = "") -> str:
    if error is None:
        return fallback
    if isinstance(error, DslError):
        return error.render(locale)
    key = getattr(error, "message_key", None)
    params = getattr(error, "params", None)
    if key and isinstance(params, dict):
        try:
            return locales.t(key, locale, **params)
        except KeyError:
            pass  # a key this build does not know: the English text still says it
    return str(error) or fallback or type(error).__name__
