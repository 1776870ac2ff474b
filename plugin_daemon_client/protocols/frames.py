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
class ToolCallDelta:
    """A piece of a tool call the model makes. Streamed OpenAI calls arrive in
    pieces that share an `index` (id and name first, then the arguments' text
    bit by bit); a call without an index is whole (non-streamed replies, the
    plugin daemon)."""

    index: int | None = None
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame. Text, reasoning or a tool call means a content token."""

    text: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    done: bool = False  # the protocol's explicit end marker (`data: [DONE]`)
    tool_calls: tuple[ToolCallDelta, ...] = ()

    @property
    def is_token(self) -> bool:
        return bool(self.text or self.reasoning or self.tool_calls)


class FrameError(Exception):
    """A frame that is not what the protocol promises; `excerpt` quotes it."""

    def __init__(self, reason: str, raw: bytes) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw[:400]


DONE = Frame(done=True)
# A non-streamed reply's body began: its first byte is the "first token" (the
# gate's first-token deadline bounds the wait for it, the stream cap the rest).
BODY_STARTED = Frame()
