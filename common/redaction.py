"""The one place a server's words pass through on their way into an error.

A model server may echo anything it was sent, credentials included, in an
error body, an error frame mid-stream, a malformed frame or a redirect's
`Location`. Code that builds an error from such text wraps it in
`ServerText`; `ServerText` prints as a placeholder, never as the text. Every
error leaving `LLMClient.invoke_llm` goes through its client's
`Redactor.scrub`, which turns each `ServerText` into a quote with every known
secret removed (before it is cut to length, so a cut cannot keep half a key)
and redacts every other string parameter too. An error that missed the scrub
says "(withheld)", it never leaks.

A secret is removed in every form a server is likely to echo: as sent, URL-
encoded, JSON-escaped, and base64 (standard and URL-safe, at any alignment
inside a longer encoded string, e.g. `Authorization: Basic base64(user:key)`).
Secrets shorter than `MIN_SECRET_CHARS` cannot be redacted without mangling
ordinary words: clients refuse them.

The one rule for everything a run, a client or a store shows: a key is
removed in every echoed form (`Redactor`), a URL never shows its password
(`safe_url` for a URL from a workflow: no credentials, no query, where keys
travel; `redact_url` for an operator's URL: the password masked, the rest
kept). `runtime/execution/redaction.py` walks events and records with it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable
from typing import Any, TypeVar
from urllib.parse import SplitResult, quote, quote_plus, urlsplit, urlunsplit

from firstgate.locales.localized_error import LocalizedError

E = TypeVar("E", bound=LocalizedError)

MIN_SECRET_CHARS = 4
MASK = "***"
_QUOTE_CHARS = 200
_DETAIL_CHARS = 500
_WITHHELD = "(withheld)"
# `Basic <base64>` as a whole: decoded and dropped when it carries a secret.
_BASIC = re.compile(r"(?i)\b(basic\s+)([A-Za-z0-9+/_-]{4,}={0,2})")


class ServerText:
    """Text a server sent, on its way into an error message.

    `quoted` renders it as a Python string literal (an excerpt of raw bytes),
    after our own `prefix`; otherwise it is a plain detail. Either way it is
    cut to `limit` characters, after redaction.
    """

    __slots__ = ("limit", "prefix", "quoted", "raw")

    def __init__(
        self, raw: bytes | str, *, quoted: bool = False, prefix: str = "", limit: int = 0
    ) -> None:
        self.raw = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        self.quoted = quoted
        self.prefix = prefix
        self.limit = limit or (_QUOTE_CHARS if quoted else _DETAIL_CHARS)

    def __str__(self) -> str:
        return _WITHHELD

    __repr__ = __str__

    def render(self, redactor: Redactor) -> str:
        text = redactor.redact(self.raw if self.quoted else self.raw.strip())
        if len(text) > self.limit:
            text = text[: self.limit] + "…"
        return self.prefix + repr(text) if self.quoted else text


def _percent_pattern(secret: str, safe: str) -> str:
    """`quote(secret, safe)` as a regex that accepts either case of hex digits."""
    parts: list[str] = []
    for char in secret:
        encoded = quote(char, safe=safe)
        if encoded == char:
            parts.append(re.escape(char))
        else:
            parts.append(re.sub(r"%([0-9A-F]{2})", lambda m: f"%(?i:{m.group(1)})", encoded))
    return "".join(parts)


def _base64_cores(secret: bytes) -> set[str]:
    """What every base64 encoding of a text containing `secret` must contain: for
    each of the three alignments, the groups made of the secret's bytes only."""
    cores: set[str] = set()
    for shift in range(3):
        padded = b"\0" * shift + secret
        full_groups = len(padded) // 3
        first = 1 if shift else 0  # the first group mixes in the bytes before it
        if full_groups - first < 1:
            continue
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            core = encode(padded[: full_groups * 3])[first * 4 :].decode("ascii")
            cores.add(core)
    return cores


def _forms(secret: str) -> set[str]:
    """Regex alternatives for every echoed form of `secret`."""
    forms = {re.escape(secret)}
    for safe in ("", "/"):
        forms.add(_percent_pattern(secret, safe))
    forms.add(re.escape(quote_plus(secret)))
    escaped = json.dumps(secret)[1:-1]
    forms.add(re.escape(escaped))
    forms.add(re.escape(escaped.replace("/", "\\/")))
    forms.update(re.escape(core) for core in _base64_cores(secret.encode("utf-8")))
    return forms


def _longest_echo(secret: str) -> int:
    """How long the longest text one of `_forms(secret)` matches can be."""
    escaped = json.dumps(secret)[1:-1]
    echoes = [secret, quote(secret, safe=""), quote_plus(secret), escaped.replace("/", "\\/")]
    echoes.extend(_base64_cores(secret.encode("utf-8")))
    return max(len(echo) for echo in echoes)


class Redactor:
    """Removes a client's secrets from text and from errors."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self.secrets = tuple(s for s in secrets if s)
        short = [s for s in self.secrets if len(s) < MIN_SECRET_CHARS]
        if short:
            raise ValueError(f"a secret must have at least {MIN_SECRET_CHARS} characters")
        forms = {form for secret in self.secrets for form in _forms(secret)}
        # Longest first: a form that contains another must win.
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(ordered)) if ordered else None
        # Text streamed in pieces holds back this much less one: an echo cut in
        # two by a chunk boundary is whole before any of it goes out.
        self.longest_echo = max((_longest_echo(s) for s in self.secrets), default=0)

    def redact(self, text: str) -> str:
        if self._pattern is None:
            return text
        text = _BASIC.sub(self._basic, text)
        return self._pattern.sub(MASK, text)

    def redact_stream(self, held: str, text: str) -> tuple[str, str]:
        """The next piece of a streamed text: (what may go out now, redacted; what
        to hold back until more arrives or the stream ends, then `redact` it).

        Only the last `longest_echo - 1` characters can be the start of an echo
        still arriving; an echo already whole there goes out whole, masked.
        """
        buffer = held + text
        if self._pattern is None:
            return buffer, ""
        cut = max(0, len(buffer) - (self.longest_echo - 1))
        for match in self._pattern.finditer(buffer):
            if match.start() < cut < match.end():
                cut = match.end()  # never cut through an echo
        return self.redact(buffer[:cut]), buffer[cut:]

    def _basic(self, match: re.Match[str]) -> str:
        token = match.group(2)
        try:
            decoded = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_")
        except (binascii.Error, ValueError):
            return match.group(0)
        text = decoded.decode("utf-8", "replace")
        if any(secret in text for secret in self.secrets):
            return match.group(1) + MASK
        return match.group(0)

    def param(self, value: Any) -> Any:
        if isinstance(value, ServerText):
            return value.render(self)
        if isinstance(value, str):
            return self.redact(value)
        return value

    def scrub(self, error: E) -> E:
        """Make `error` safe to show: server text quoted and redacted, every string
        parameter redacted, the message re-rendered, no exception chained to it."""
        for key, value in error.params.items():
            error.params[key] = self.param(value)
        error.args = (error.render(),)
        error.__cause__ = None
        error.__context__ = None
        error.__suppress_context__ = True
        return error


# --- URLs: never their password ---------------------------------------------


def _host_port(parts: SplitResult) -> str:
    """`host[:port]` of a URL, IPv6 in brackets, an unreadable port left out."""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port}" if port else host


def safe_url(url: object) -> str:
    """`url` without `user:password@` and without its query (where keys travel):
    how a URL that came from a workflow is shown."""
    try:
        parts = urlsplit(str(url))
    except ValueError:
        return "(invalid URL)"
    return urlunsplit((parts.scheme, _host_port(parts), parts.path, "", ""))


def redact_url(url: str, *, user: bool = True) -> str:
    """The URL as it may be shown: the password replaced by `***` (the user, the
    path and the query kept: an operator's database or broker URL). `user=False`
    masks the whole `user:password@` (a key may travel as the user name)."""
    try:
        parts = urlsplit(url)
        password = parts.password
        username = parts.username
    except ValueError:
        return "(invalid URL)"
    if password is None and (user or username is None):
        return url
    userinfo = f"{username or ''}:{MASK}" if user else MASK
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{_host_port(parts)}"))


def has_credentials(url: str) -> bool:
    """Whether `url` carries `user:password@` (or a user alone, where a key may
    travel): an operator's endpoint that does is refused, never stripped."""
    try:
        parts = urlsplit(url)
        return parts.username is not None or parts.password is not None
    except ValueError:
        return False
