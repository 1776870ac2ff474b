"""UI and runtime message strings, one flat JSON file per locale.

`t(key, locale, **params)` renders a message. A key missing from a
non-English locale falls back to en-US; a key missing from en-US is a
programming error and raises KeyError.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path

DEFAULT_LOCALE = "en-US"
_DIR = Path(__file__).resolve().parent
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def available_locales() -> list[str]:
    return sorted(p.stem for p in _DIR.glob("*.json"))


@cache
def catalog(locale: str) -> dict[str, str]:
    path = _DIR / f"{locale}.json"
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def normalize_locale(value: str | None) -> str:
    """Map `de_DE.UTF-8`, `de-de` or `de` onto a locale we ship, else en-US."""
    if not value:
        return DEFAULT_LOCALE
    tag = value.split(".", 1)[0].split("@", 1)[0].replace("_", "-")
    if tag in ("C", "POSIX"):
        return DEFAULT_LOCALE
    known = {name.lower(): name for name in available_locales()}
    if tag.lower() in known:
        return known[tag.lower()]
    lang = tag.split("-", 1)[0].lower()
    for lower, name in sorted(known.items()):
        if lower.split("-", 1)[0] == lang:
            return name
    return DEFAULT_LOCALE


def locale_from_env() -> str:
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        if os.environ.get(var):
            return normalize_locale(os.environ[var])
    return DEFAULT_LOCALE


def render(template: str, params: dict[str, object]) -> str:
    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        return str(params[name]) if name in params else match.group(0)

    return _PLACEHOLDER.sub(sub, template)


def t(key: str, locale: str | None = None, **params: object) -> str:
    english = catalog(DEFAULT_LOCALE)
    if key not in english:
        raise KeyError(f"message key {key!r} is missing from {DEFAULT_LOCALE}")
    template = catalog(normalize_locale(locale) if locale else DEFAULT_LOCALE).get(key) or english[key]
    return render(template, params)
