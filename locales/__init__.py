"""UI and runtime message strings, one flat JSON file per locale.

`t(key, locale, **params)` renders a message. A key missing (or empty) in a
non-English locale falls back to en-US; a key missing from en-US is a
programming error and raises KeyError. Placeholders are written `{{name}}`;
a placeholder without a matching parameter is left as written, so a message
is never lost to a formatting slip.

Locale tags are matched the way users write them: `de_DE.UTF-8`, `de-de`,
`de`, `zh_TW` (Traditional Chinese), `zh_CN` (Simplified Chinese). Anything
unknown becomes en-US.
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

# Chinese is split by script, not by country: these regions and scripts read
# Traditional characters, every other `zh` tag reads Simplified.
_ZH_HANT_SUBTAGS = frozenset({"hant", "tw", "hk", "mo"})


def placeholders(template: str) -> set[str]:
    """The parameter names a template refers to."""
    return set(_PLACEHOLDER.findall(template))


@cache
def available_locales() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in _DIR.glob("*.json")))


@cache
def catalog(locale: str) -> dict[str, str]:
    """The flat key -> template mapping of one shipped locale ({} if not shipped)."""
    if locale not in available_locales():
        return {}
    with (_DIR / f"{locale}.json").open(encoding="utf-8") as fh:
        data = json.load(fh)
    return {str(k): v for k, v in data.items() if isinstance(v, str)}


def normalize_locale(value: str | None) -> str:
    """Map `de_DE.UTF-8`, `de-de` or `de` onto a locale we ship, else en-US."""
    if not value:
        return DEFAULT_LOCALE
    tag = value.strip().split(".", 1)[0].split("@", 1)[0].replace("_", "-")
    if not tag or tag in ("C", "POSIX"):
        return DEFAULT_LOCALE
    known = {name.lower(): name for name in available_locales()}
    if tag.lower() in known:
        return known[tag.lower()]
    subtags = tag.lower().split("-")
    lang = subtags[0]
    if lang == "zh":
        wanted = "zh-hant" if _ZH_HANT_SUBTAGS.intersection(subtags[1:]) else "zh-hans"
        return known.get(wanted, DEFAULT_LOCALE)
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


def t(key: str, locale: str | None = None, /, **params: object) -> str:
    """Render message `key` in `locale` (en-US when None), falling back per key to en-US."""
    english = catalog(DEFAULT_LOCALE)
    if key not in english:
        raise KeyError(f"message key {key!r} is missing from {DEFAULT_LOCALE}")
    template = catalog(normalize_locale(locale)).get(key) or english[key]
    return render(template, params)
