"""What a protocol decoder hands the client: one decoded frame."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def from_mapping(cls, raw: object) -> Usage | None:
        if not isinstance(raw, dict):
            return None

        def num(key: str) -> int:
            value = raw.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                return 0
            # JSON allows NaN, Infinity and 1e999; int() of those raises.
            return int(value) if math.isfinite(value) else 0

        return cls(num("prompt_tokens"), num("completion_tokens"), num("total_tokens"))


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame. `text`/`reasoning` non-empty means a content token."""

    text: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    done: bool = False  # the protocol's explicit end marker (`data: [DONE]`)

    @property
    def is_token(self) -> bool:
        return bool(self.text or self.reasoning)


class FrameError(Exception):
    """A frame that is not what the protocol promises; `excerpt` quotes it."""

    def __init__(self, reason: str, raw: bytes) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw[:400]


DONE = Frame(done=True)
