"""What text the wire and the store can carry: the one rule.

NUL (PostgreSQL's text holds none) and UTF-16 surrogates that are not part of a
pair (no UTF-8 for them) are valid in JSON (`"\\u0000"`, `"\\udfff"`) and in a
Python string, but no reply, event stream or database can keep them. Where
they come from a client they are refused (serve's bodies); where they come
from a model or a run they are mended: pairs joined, the rest U+FFFD.
"""

from __future__ import annotations

import re

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def is_storable(text: str) -> bool:
    return UNSTORABLE.search(text) is None


def mend(text: str) -> str:
    """`text` with surrogate pairs joined and every lone surrogate and NUL as U+FFFD."""
    if is_storable(text):
        return text
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return joined.replace("\x00", REPLACEMENT)


def shown(text: str) -> str:
    """`text` as a message may quote it: every unstorable character as U+FFFD."""
    return UNSTORABLE.sub(REPLACEMENT, text)
