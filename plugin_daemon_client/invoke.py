"""The one path every model call takes: `invoke(plan, request, sinks)`.

A node builds a `ModelRequest` (messages, parameters, tools, a JSON schema,
its own gate budgets) and hands it with the route plan and its sinks to
`invoke`, which owns everything between that and the reply:

- the first-token budget of every target (node > env > settings file >
  formula, `first_token_budget.py`), resolved before the first request so a
  bad setting fails at once;
- one gate per target (`gate.py`) with the target's probe (the watchdog's
  waiting is reported through `sinks.wait`) and the run's cancel token
  attached, so an abort shuts whichever request is in flight;
- the fallback chain (`fallback.py`): caps, total budget, breakers, swaps,
  reported through `sinks.fallback`;
- the reply: text (streamed through `sinks.chunk` as it arrives), reasoning,
  tool calls assembled from their streamed pieces, usage, and the process
  data every model-calling node reports.

Errors are the transport's typed errors, unchanged: they reach the node's
retry, fail-branch and default-value strategies as they are.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from firstgate.common.cancel import Cancellable
from firstgate.common.storable_text import REPLACEMENT, is_storable, mend

from .call_telemetry import CallRecord, current_call, model_call
from .fallback import FallbackChain, Target
from .first_token_budget import (
    ResolvedBudget,
    estimate_prompt_tokens,
    estimate_text_tokens,
    resolve_first_token_budget,
)
from .gate import first_token_gate
from .plan import RoutePlan, RouteTarget
from .protocols.base import ToolSpec
from .protocols.frames import ToolCallDelta, Usage

if TYPE_CHECKING:
    from .fallback import FallbackEvent
    from .gate import Gate, WaitInfo


@dataclass(frozen=True, slots=True)
class CallBudgets:
    """The node's own gate budgets, in seconds. `first_token_s`: None lets the
    next level decide (environment, settings file, formula), 0 disables it;
    `idle_s` and `stream_total_s`: None or 0 disables that deadline."""

    first_token_s: float | None = None
    idle_s: float | None = None
    stream_total_s: float | None = None


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model call as a node asks for it (messages are OpenAI-shaped).

    `json_schema`: the answer must be JSON of this schema. A target that takes
    a schema as its response format gets it there; for any other target the
    schema is written into the prompt when `schema_in_prompt` (a node whose own
    prompt already spells the answer's shape leaves it off). `stream=False`
    asks for one JSON body (the first byte ends the first-token wait).
    """

    model: str
    messages: list[dict[str, Any]]
    parameters: Mapping[str, Any] = field(default_factory=dict)
    stop: list[str] | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str | None = None
    json_schema: dict[str, Any] | None = None
    schema_in_prompt: bool = False
    stream: bool = True
    budgets: CallBudgets = CallBudgets()


def _no_chunk(text: str, target: str | None = None) -> None:
    return None


def _no_wait(info: WaitInfo, target: str | None = None) -> None:
    return None


def _no_event(event: FallbackEvent) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Sinks:
    """Where a call reports as it goes: text chunks (`chunk(text, target)`),
    the watchdog's waits, the fallback chain's decisions; and the run's cancel
    token, which shuts the call's socket down."""

    chunk: Callable[..., None] = _no_chunk
    wait: Callable[..., None] = _no_wait
    fallback: Callable[[FallbackEvent], None] = _no_event
    cancel: Cancellable | None = None


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A tool call the model made: `arguments` is the JSON text it wrote."""

    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> Any:
        """The arguments as JSON, or None when they are not JSON."""
        try:
            return json.loads(self.arguments) if self.arguments.strip() else {}
        except (ValueError, RecursionError):
            return None


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What the call answered, which target answered it, and how."""

    text: str
    reasoning: str
    tool_calls: tuple[ToolCallRequest, ...]
    usage: Usage | None
    finish_reason: str | None
    route: str
    failures: tuple[tuple[str, str], ...]  # (target, error type) of the targets before it
    prompt_tokens: int
    budgets: Mapping[str, ResolvedBudget]

    def usage_dict(self) -> dict[str, Any] | None:
        return None if self.usage is None else dataclasses.asdict(self.usage)

    def process_data(self) -> dict[str, Any]:
        """Which route answered, each target's first-token budget and where it
        came from, and the fallback failures before the answer."""
        return {
            "route": self.route,
            "prompt_tokens_estimate": self.prompt_tokens,
            "first_token_budget": {
                name: {
                    "seconds": budget.first_token_s,
                    "source": budget.source,
                    "ceiling_s": budget.ceiling_s,
                    "ceiling_source": budget.ceiling_source,
                }
                for name, budget in self.budgets.items()
            },
            "fallback_failures": [
                {"target": name, "error_type": kind} for name, kind in self.failures
            ],
        }


@dataclass(slots=True)
class _Collected:
    """What one attempt on one target streamed."""

    parts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[ToolCallDelta] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str | None = None


def invoke(plan: RoutePlan, request: ModelRequest, sinks: Sinks) -> ModelReply:
    """Send `request` along `plan` (see the module docstring)."""
    prompt_tokens = _prompt_tokens(request)
    budgets = _resolve_budgets(plan, request, prompt_tokens)
    if plan.fallbacks:
        collected, route, failures = _run_chain(plan, request, sinks, budgets)
    else:
        # No chain: one gate, still with the route's probe and the resolved budget.
        target = plan.primary
        with _gate(target, request, budgets[target.name], sinks):
            collected, route, failures = _attempt(target, request, sinks), target.name, ()
    return ModelReply(
        text="".join(collected.parts),
        reasoning="".join(collected.reasoning),
        tool_calls=assemble_tool_calls(collected.calls),
        usage=collected.usage,
        finish_reason=collected.finish_reason,
        route=route,
        failures=failures,
        prompt_tokens=prompt_tokens,
        budgets=budgets,
    )


def _prompt_tokens(request: ModelRequest) -> int:
    tokens = estimate_prompt_tokens(request.messages)
    if request.tools:  # the tools' schemas are part of what the server reads first
        schemas = json.dumps([dataclasses.asdict(t) for t in request.tools], ensure_ascii=False)
        tokens += estimate_text_tokens(schemas)
    return tokens


def _resolve_budgets(
    plan: RoutePlan, request: ModelRequest, prompt_tokens: int
) -> dict[str, ResolvedBudget]:
    """The first-token budget of every target, each with its own route's settings."""
    return {
        target.name: resolve_first_token_budget(
            request.budgets.first_token_s,
            prompt_tokens=prompt_tokens,
            route=target.budget_settings,
            route_name=target.name,
        )
        for target in plan.targets
    }


@contextmanager
def _gate(
    target: RouteTarget, request: ModelRequest, budget: ResolvedBudget, sinks: Sinks
) -> Iterator[Gate]:
    """This target's own gate: its resolved first-token budget, its probe, and the
    run's cancel token attached, so an abort shuts down whichever attempt is in flight;
    inside the attempt's span (`call_telemetry.py`)."""

    def on_wait(info: WaitInfo) -> None:
        sinks.wait(info, target=target.name)

    budgets = request.budgets
    kind = getattr(target.client, "kind", "")
    with model_call(
        target.name, kind, target.base_url, request.model, request.parameters, budget
    ) as record:
        with first_token_gate(
            idle_timeout=budgets.idle_s,
            stream_total_timeout=budgets.stream_total_s,
            on_wait=on_wait,
            probe=target.probe,
            on_probe=None if record is None else record.probe,
            **budget.gate_kwargs(),
        ) as gate:
            if record is not None:
                record.gate = gate
            attached = sinks.cancel.attached(gate.cancel) if sinks.cancel else nullcontext()
            with attached:
                yield gate


class TextMender:
    """A model's streamed text as UTF-8 (the wire, the store) can carry it. A
    server may split one character outside the BMP between two frames, half a
    surrogate pair in each JSON string: a trailing high surrogate waits for the
    next piece. A surrogate left alone, and NUL (which PostgreSQL's text cannot
    hold), become U+FFFD."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> str:
        if self._held:
            text, self._held = self._held + text, ""
        if is_storable(text):
            return text
        if "\ud800" <= text[-1] <= "\udbff":
            text, self._held = text[:-1], text[-1]
        return mend(text)

    def flush(self) -> str:
        """What is still held at the end of the stream (half a pair: U+FFFD)."""
        held, self._held = self._held, ""
        return REPLACEMENT if held else ""


def _attempt(target: RouteTarget, request: ModelRequest, sinks: Sinks) -> _Collected:
    """One attempt on `target`, inside the gate the caller opened."""
    collected = _Collected()
    text, reasoning = TextMender(), TextMender()
    record: CallRecord | None = current_call()
    for chunk in target.client.invoke_llm(**_call_arguments(target, request)):
        piece = text.feed(chunk.text) if chunk.text else ""
        if piece:
            if record is not None:
                record.first_token()
            collected.parts.append(piece)
            sinks.chunk(piece, target=target.name)
        if getattr(chunk, "reasoning", ""):
            collected.reasoning.append(reasoning.feed(chunk.reasoning))
        collected.calls.extend(getattr(chunk, "tool_calls", ()))
        if chunk.finish_reason:
            collected.finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            collected.usage = chunk.usage
    rest = text.flush()
    if rest:
        collected.parts.append(rest)
        sinks.chunk(rest, target=target.name)
    collected.reasoning.append(reasoning.flush())
    if record is not None:
        record.reply(collected.usage, collected.finish_reason)
    return collected


def _call_arguments(target: RouteTarget, request: ModelRequest) -> dict[str, Any]:
    """The client's keyword arguments; the newer ones only when the request uses them."""
    messages = request.messages
    arguments: dict[str, Any] = {
        "model": request.model,
        "parameters": dict(request.parameters),
        "stop": request.stop,
    }
    if request.tools:
        arguments["tools"] = request.tools
        if request.tool_choice:
            arguments["tool_choice"] = request.tool_choice
    if request.json_schema is not None:
        if target.json_schema:
            arguments["json_schema"] = request.json_schema
        elif request.schema_in_prompt:
            messages = with_schema_instruction(messages, request.json_schema)
    if not request.stream:
        arguments["stream"] = False
    arguments["messages"] = messages
    return arguments


SCHEMA_INSTRUCTION = (
    "Answer with one JSON object that matches this JSON schema, and nothing else "
    "(no code fence, no explanation):\n{schema}"
)


def with_schema_instruction(
    messages: list[dict[str, Any]], schema: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """`messages` with the schema instruction in front of the system prompt (for
    a server that cannot take a schema as its response format)."""
    instruction = SCHEMA_INSTRUCTION.format(schema=json.dumps(schema, ensure_ascii=False))
    system = next((m for m in messages if m.get("role") == "system"), None)
    if system is not None and isinstance(system.get("content"), str):
        merged = {**system, "content": f"{instruction}\n\n{system['content']}"}
        return [merged if m is system else m for m in messages]
    return [{"role": "system", "content": instruction}, *messages]


def _run_chain(
    plan: RoutePlan, request: ModelRequest, sinks: Sinks, budgets: dict[str, ResolvedBudget]
) -> tuple[_Collected, str, tuple[tuple[str, str], ...]]:
    """Walk the fallback chain; errors (exhausted, budget, non-transient) propagate
    unchanged to the node's error strategy, and a retry walks the chain again."""
    for warning in plan.warnings:
        sinks.fallback(warning)
    targets = [
        Target(
            target.name,
            attempt=_bind(_attempt, target, request, sinks),
            base_url=target.base_url,
            open_gate=_bind(_gate, target, request, budgets[target.name], sinks),
            probe=target.probe,
            allow_same_host_fallback=target.allow_same_host_fallback,
        )
        for target in plan.targets
    ]
    chain = FallbackChain(targets, plan.policy, breakers=plan.breakers, on_event=sinks.fallback)
    result = chain.run()
    failures = tuple((name, error.error_type) for name, error in result.attempts)
    return result.value, result.target, failures


def _bind(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    return lambda: fn(*args)


def assemble_tool_calls(deltas: list[ToolCallDelta]) -> tuple[ToolCallRequest, ...]:
    """Whole tool calls from their pieces: pieces with the same index are one
    call (id and name from the first that has them, arguments concatenated);
    a piece without an index is a whole call of its own."""
    calls: list[list[str]] = []  # [id, name, arguments]
    by_index: dict[int, list[str]] = {}
    for delta in deltas:
        if delta.index is None:
            calls.append([delta.id, delta.name, delta.arguments])
            continue
        call = by_index.get(delta.index)
        if call is None:
            call = by_index[delta.index] = [delta.id, delta.name, ""]
            calls.append(call)
        else:
            call[0] = call[0] or delta.id
            call[1] = call[1] or delta.name
        call[2] += delta.arguments
    return tuple(
        ToolCallRequest(call_id or f"call_{number}", name, arguments)
        for number, (call_id, name, arguments) in enumerate(calls, 1)
        if name
    )
