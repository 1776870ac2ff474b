"""Everything that talks HTTP to a model server.

The public surface:

- `first_token_gate(...)`: open a gate (deadlines in seconds) for the model
  requests made in this context; `current_gate()` returns it.
- `LLMClient(kind, base_url, ...)` and `LLMClient.invoke_llm(...)`, which
  yields `LLMChunk`s.
- `errors`: the one exception hierarchy.
"""

from . import errors
from .budgets import GateBudgets
from .client import LLMChunk, LLMClient
from .errors import (
    FirstGateError,
    FirstTokenTimeoutError,
    IdleTimeoutError,
    StreamCancelledError,
    StreamTimeoutError,
    StreamTotalTimeoutError,
)
from .gate import Gate, WaitInfo, current_gate, first_token_gate
from .protocols.frames import Usage
from .transport import GatedTransport

__all__ = [
    "FirstGateError",
    "FirstTokenTimeoutError",
    "Gate",
    "GateBudgets",
    "GatedTransport",
    "IdleTimeoutError",
    "LLMChunk",
    "LLMClient",
    "StreamCancelledError",
    "StreamTimeoutError",
    "StreamTotalTimeoutError",
    "Usage",
    "WaitInfo",
    "current_gate",
    "errors",
    "first_token_gate",
]
