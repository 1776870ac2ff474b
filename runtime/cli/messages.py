"""Render errors for people: in the reader's locale when they are localized."""

from __future__ import annotations

from firstgate.locales.localized_error import LocalizedError


def render_error(error: BaseException | None, locale: str | None, fallback: str = "") -> str:
    if error is None:
        return fallback
    if isinstance(error, LocalizedError):
        return error.render(locale)
    return str(error) or fallback or type(error).__name__
