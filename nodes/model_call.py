"""What every model-calling node shares: the DSL's `model` block and the
node's gate budgets (`invocation`), and how a node hands a request to the
invoke path (`plugin_daemon_client.invoke`) with its context's sinks.

Nothing here waits, times or falls back: the invoke path does all of that.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from firstgate.common.dsl import DslModel, Milliseconds, dsl_error, shown
from firstgate.common.durations import DurationError, parse_duration
from firstgate.nodes.base import NodeContext, NodeRunError, RoutePlan, plan_for
from firstgate.nodes.llm.prompt import MemoryConfig, history_text
from firstgate.plugin_daemon_client.invoke import (
    CallBudgets,
    ModelReply,
    ModelRequest,
    Sinks,
    invoke,
)
from pydantic import BeforeValidator, Field

# Gate budgets that older flows wrote into completion_params. They are never
# sent to the model; `invocation` wins when both are present.
GATE_PARAM_KEYS = ("first_token_timeout_ms", "idle_timeout_ms", "stream_total_timeout_ms")


class ModelConfig(DslModel):
    # The editor writes "" for both until a model is chosen: the default route serves it.
    provider: str = ""
    name: str = ""
    mode: Literal["chat", "completion"] = "chat"
    completion_params: dict[str, Any] = Field(default_factory=dict)

    def parameters(self) -> tuple[dict[str, Any], list[str] | None]:
        """The model parameters to send, and the stop words apart."""
        params = {k: v for k, v in self.completion_params.items() if k not in GATE_PARAM_KEYS}
        stop = params.pop("stop", None)
        return params, (list(stop) if stop else None)


def _first_token_ms(value: Any) -> int | None:
    """Empty or "auto": None (the budget grows with the prompt); 0 disables it."""
    try:
        number = parse_duration(value, whole=True)
    except DurationError:
        raise dsl_error(
            "dsl.firstTokenMilliseconds",
            'must be a whole number of milliseconds, "auto" or empty (then the budget grows '
            "with the prompt; 0 disables it), got {got}",
            got=shown(value),
        ) from None
    return None if number is None else int(number)


FirstTokenMilliseconds = Annotated[int | None, BeforeValidator(_first_token_ms)]


class Invocation(DslModel):
    """The gate's budgets, in milliseconds.

    First token: empty or "auto" means the continuous budget (environment,
    settings file, then the formula from the estimated prompt size); 0
    disables it. Idle and stream total: empty or 0 disables the deadline.
    """

    first_token_timeout_ms: FirstTokenMilliseconds = None
    idle_timeout_ms: Milliseconds = None
    stream_total_timeout_ms: Milliseconds = None

    def budgets(self) -> CallBudgets:
        first = self.first_token_timeout_ms
        return CallBudgets(
            # None ("auto") lets the next level decide; an explicit 0 stays 0
            # (the resolver turns it into "disabled").
            first_token_s=None if first is None else first / 1000.0,
            idle_s=_seconds(self.idle_timeout_ms),
            stream_total_s=_seconds(self.stream_total_timeout_ms),
        )


def _seconds(ms: int | None) -> float | None:
    """Milliseconds from the DSL to the gate's seconds; 0 or empty disables."""
    return ms / 1000.0 if ms else None


def move_legacy_gate_params(raw: Any) -> Any:
    """A node's raw data with gate keys moved out of `model.completion_params`
    into `invocation` (which wins over them)."""
    if not isinstance(raw, dict):
        return raw
    model = raw.get("model")
    params = model.get("completion_params") if isinstance(model, dict) else None
    if not isinstance(params, dict) or not any(k in params for k in GATE_PARAM_KEYS):
        return raw
    legacy = {k: params[k] for k in GATE_PARAM_KEYS if k in params}
    invocation = raw.get("invocation")
    merged = {**legacy, **(invocation if isinstance(invocation, dict) else {})}
    stripped = {k: v for k, v in params.items() if k not in GATE_PARAM_KEYS}
    return {**raw, "model": {**model, "completion_params": stripped}, "invocation": merged}


def sinks(ctx: NodeContext, *, stream_text: bool) -> Sinks:
    """The node context's sinks; `stream_text=False` keeps the reply's text out
    of the run's chunk events (a classifier's JSON is not an answer)."""
    if stream_text:
        return Sinks(ctx.emit_chunk, ctx.emit_wait, ctx.emit_fallback, ctx.cancel)
    return Sinks(wait=ctx.emit_wait, fallback=ctx.emit_fallback, cancel=ctx.cancel)


def route_plan(ctx: NodeContext, provider: str) -> RoutePlan:
    """The route plan of `provider` (take it once per call: a plan carries the
    route's configuration warnings the first time it is handed out)."""
    if ctx.clients is None:
        raise NodeRunError("dsl.node.noModelRoute")
    return plan_for(ctx.clients, provider)


def call_model(
    ctx: NodeContext,
    provider: str,
    request: ModelRequest,
    *,
    stream_text: bool,
    plan: RoutePlan | None = None,
) -> ModelReply:
    """`request` through the invoke path, along the route plan of `provider`
    (`plan`, when the caller already took it)."""
    if plan is None:
        plan = route_plan(ctx, provider)
    return invoke(plan, request, sinks(ctx, stream_text=stream_text))


def memory_text(memory: MemoryConfig | None, ctx: NodeContext) -> str:
    """The conversation's earlier turns as text for a node's system prompt, when
    the node has memory on and the run is a turn of a conversation (Dify gives
    nodes memory only then); else empty."""
    if memory is None or not memory.enabled or not ctx.variables.get(("sys", "conversation_id")):
        return ""
    return history_text(ctx.history, memory)
