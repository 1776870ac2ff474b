"""The first-token budget when nobody pinned one: continuous in the prompt size.

    budget(n) = min(ceiling, cold_start + base + per_1k * n / 1000)

with n the (estimated) prompt tokens. Defaults: 180 s cold start (a local
server may have to load or swap the model back in), 180 s base, 4 s per 1,000
prompt tokens, ceiling 1800 s. There is no step anywhere: one more token
never changes the budget by more than `per_1k / 1000` seconds, and never
lowers it. The step schedule it replaces (tests/unit/test_first_token_budget.py,
`STEP_SCHEDULE`) is a floor the default formula never undercuts.

Precedence, first match wins (`resolve_first_token_budget`):

| # | source | first-token budget | ceiling |
|---|---|---|---|
| 1 | the node (`invocation.first_token_timeout_ms`) | a number: pinned (0, negative, NaN = disabled, the gate's rule) | `node_ceiling` |
| 2 | environment | `FIRSTGATE_FIRST_TOKEN_TIMEOUT_S` | `FIRSTGATE_FIRST_TOKEN_CEILING_S` |
| 3 | models file route | `first_token_timeout_s` | `first_token_ceiling_s` |
| 4 | formula | constants: env `FIRSTGATE_FIRST_TOKEN_{COLD_START,BASE,PER_1K}_S`, then route `first_token_{cold_start,base,per_1k}_s`, then defaults | 1800 s |

A pinned number is used as given, never clamped: an operator who pinned a
number gets that number. Only the formula is clamped to the ceiling. `None`,
an empty string or `"auto"` at any level means "not set here", so the next
level decides. Any other value that is not a number of seconds, or that is
negative, NaN or infinite, is a `BudgetConfigError` naming the variable or
key, never a silent default.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from firstgate.common.durations import DurationError, is_unset, parse_duration

from .budgets import DEFAULT_CEILING_S, coerce_budget
from .errors import BudgetConfigError, CeilingConfigError, GateConfigError

DEFAULT_COLD_START_S = 180.0
DEFAULT_BASE_S = 180.0
DEFAULT_PER_1K_S = 4.0

ENV_TIMEOUT = "FIRSTGATE_FIRST_TOKEN_TIMEOUT_S"
ENV_CEILING = "FIRSTGATE_FIRST_TOKEN_CEILING_S"
ENV_COLD_START = "FIRSTGATE_FIRST_TOKEN_COLD_START_S"
ENV_BASE = "FIRSTGATE_FIRST_TOKEN_BASE_S"
ENV_PER_1K = "FIRSTGATE_FIRST_TOKEN_PER_1K_S"

ROUTE_TIMEOUT = "first_token_timeout_s"
ROUTE_CEILING = "first_token_ceiling_s"
ROUTE_COLD_START = "first_token_cold_start_s"
ROUTE_BASE = "first_token_base_s"
ROUTE_PER_1K = "first_token_per_1k_s"
ROUTE_KEYS = (ROUTE_TIMEOUT, ROUTE_CEILING, ROUTE_COLD_START, ROUTE_BASE, ROUTE_PER_1K)

Source = Literal["node", "env", "route", "formula", "default"]


# --- the formula -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetFormula:
    cold_start_s: float = DEFAULT_COLD_START_S
    base_s: float = DEFAULT_BASE_S
    per_1k_s: float = DEFAULT_PER_1K_S
    ceiling_s: float | None = DEFAULT_CEILING_S

    def budget(self, prompt_tokens: int | float) -> float:
        """Seconds for the first token of a prompt of `prompt_tokens` tokens."""
        tokens = max(0.0, float(prompt_tokens))
        raw = self.cold_start_s + self.base_s + self.per_1k_s * tokens / 1000.0
        return raw if self.ceiling_s is None else min(raw, self.ceiling_s)


# --- estimating the prompt size ----------------------------------------------

# Why these numbers: English and code average about 4 characters per token
# in llama/GPT tokenizers; CJK and most other non-ASCII scripts are closer
# to one token per character, so counting them as 1 each errs towards a
# larger estimate, the safe side for a timeout. Each chat message costs a
# few tokens of template (role markers, separators), and the reply is primed
# with a few more.
CHARS_PER_TOKEN_ASCII = 4.0
TOKENS_PER_NON_ASCII_CHAR = 1.0
TOKENS_PER_MESSAGE = 4
TOKENS_REPLY_PRIMING = 3


def estimate_text_tokens(text: str) -> int:
    """Monotone in the text: appending any character never lowers the estimate."""
    ascii_chars = sum(1 for ch in text if ch < "\x80")
    other = len(text) - ascii_chars
    return math.ceil(ascii_chars / CHARS_PER_TOKEN_ASCII + other * TOKENS_PER_NON_ASCII_CHAR)


def _message_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: count the text parts
        return "".join(
            str(part.get("text", "")) if isinstance(part, Mapping) else str(part)
            for part in content
        )
    return str(content)


def estimate_prompt_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Prompt tokens of rendered chat messages (`[{"role", "content"}, ...]`), estimated."""
    total = TOKENS_REPLY_PRIMING
    for message in messages:
        total += TOKENS_PER_MESSAGE + estimate_text_tokens(_message_text(message.get("content")))
    return total


# --- reading settings --------------------------------------------------------


def _number(
    name: str,
    value: object,
    *,
    allow_zero: bool,
    error: type[GateConfigError] = BudgetConfigError,
) -> float | None:
    """Seconds from a setting; None when it says "not set here" (None, "", "auto")."""
    try:
        return parse_duration(value, zero=allow_zero)
    except DurationError:
        raise error(name=name, value=repr(value)[:60]) from None


@dataclass(frozen=True, slots=True)
class _Setting:
    value: float | None
    source: Source


def _first(
    candidates: Iterable[tuple[Source, str, object]],
    *,
    allow_zero: bool,
    error: type[GateConfigError] = BudgetConfigError,
) -> _Setting | None:
    for source, key, raw in candidates:
        value = _number(key, raw, allow_zero=allow_zero, error=error)
        if value is not None:
            return _Setting(value, source)
    return None


@dataclass(frozen=True, slots=True)
class ResolvedBudget:
    """What the gate gets: `first_token_s` None means the deadline is disabled."""

    first_token_s: float | None
    ceiling_s: float
    source: Source
    ceiling_source: Source
    prompt_tokens: int | None
    formula: BudgetFormula

    def gate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `first_token_gate(...)`."""
        return {
            "first_token_timeout": self.first_token_s,
            "ceiling": self.ceiling_s,
            "prompt_tokens": self.prompt_tokens,
        }


def resolve_first_token_budget(
    node_value: object = None,
    *,
    prompt_tokens: int | None = None,
    route: Mapping[str, Any] | None = None,
    route_name: str = "route",
    env: Mapping[str, str] | None = None,
    node_ceiling: object = None,
) -> ResolvedBudget:
    """Apply the precedence table of this module's docstring.

    `node_value` is seconds (the node converts its milliseconds); a pinned 0
    disables the deadline, as everywhere in firstgate. `route` is the models
    file entry of the route (only the `first_token_*` keys are read).
    """
    env = os.environ if env is None else env
    route = route or {}

    def route_key(key: str) -> str:
        return f"providers.{route_name}.{key}"

    ceiling = _first(
        [
            ("node", "node first_token_ceiling", node_ceiling),
            ("env", ENV_CEILING, env.get(ENV_CEILING)),
            ("route", route_key(ROUTE_CEILING), route.get(ROUTE_CEILING)),
        ],
        allow_zero=False,
        error=CeilingConfigError,
    ) or _Setting(DEFAULT_CEILING_S, "default")
    assert ceiling.value is not None

    def constant(env_name: str, key: str, default: float) -> float:
        found = _first(
            [("env", env_name, env.get(env_name)), ("route", route_key(key), route.get(key))],
            allow_zero=True,
        )
        return default if found is None or found.value is None else found.value

    # Read the formula's constants even when a pinned value wins: a bad
    # setting is reported when it is written, not on the day it first matters.
    formula = BudgetFormula(
        cold_start_s=constant(ENV_COLD_START, ROUTE_COLD_START, DEFAULT_COLD_START_S),
        base_s=constant(ENV_BASE, ROUTE_BASE, DEFAULT_BASE_S),
        per_1k_s=constant(ENV_PER_1K, ROUTE_PER_1K, DEFAULT_PER_1K_S),
        ceiling_s=ceiling.value,
    )
    if not is_unset(node_value):
        # The node's field follows the gate's rule (0, negative, NaN or
        # infinite disable the deadline; not a number is an error).
        node_s = coerce_budget("first_token_timeout", node_value)
        return ResolvedBudget(node_s, ceiling.value, "node", ceiling.source, prompt_tokens, formula)
    pinned = _first(
        [
            ("env", ENV_TIMEOUT, env.get(ENV_TIMEOUT)),
            ("route", route_key(ROUTE_TIMEOUT), route.get(ROUTE_TIMEOUT)),
        ],
        allow_zero=True,
    )
    if pinned is not None:
        first_token = pinned.value if pinned.value else None  # 0 disables
        return ResolvedBudget(
            first_token, ceiling.value, pinned.source, ceiling.source, prompt_tokens, formula
        )
    tokens = prompt_tokens if prompt_tokens is not None else 0
    return ResolvedBudget(
        formula.budget(tokens), ceiling.value, "formula", ceiling.source, prompt_tokens, formula
    )
