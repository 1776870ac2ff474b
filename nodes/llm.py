"""LLM node: renders the prompt, streams the reply through a first-token gate,
and returns the text. Errors propagate: the engine's error handler decides
between retry, fail-branch and default value."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from nodes.base import (
    Needs,
    NodeContext,
    NodeResult,
    NodeRunError,
    RoutePlan,
    RouteTarget,
    plan_for,
)
from nodes.config import (
    BaseNodeData,
    DslModel,
    Milliseconds,
    dsl_error,
    shown,
)
from nodes.llm_prompt import (
    ContextConfig,
    MemoryConfig,
    PromptConfig,
    PromptMessage,
    VisionConfig,
    build_messages,
    prompt_selectors,
    shown_prompt,
)
from nodes.selectors import Selector
from plugin_daemon_client.durations import DurationError, parse_duration

if TYPE_CHECKING:
    from plugin_daemon_client.first_token_budget import ResolvedBudget
    from plugin_daemon_client.gate import Gate, WaitInfo

TYPE = "llm"
SUPPORTS_RETRY = True

# Gate budgets that older flows wrote into completion_params. They are never
# sent to the model; `invocation` wins when both are present.
GATE_PARAM_KEYS = ("first_token_timeout_ms", "idle_timeout_ms", "stream_total_timeout_ms")


class ModelConfig(DslModel):
    # The editor writes "" for both until a model is chosen: the default route serves it.
    provider: str = ""
    name: str = ""
    mode: Literal["chat", "completion"] = "chat"
    completion_params: dict[str, Any] = Field(default_factory=dict)


class StructuredOutput(DslModel):
    enabled: bool = False


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
    models file, then the formula from the estimated prompt size); 0 disables
    it. Idle and stream total: empty or 0 disables the deadline.
    """

    first_token_timeout_ms: FirstTokenMilliseconds = None
    idle_timeout_ms: Milliseconds = None
    stream_total_timeout_ms: Milliseconds = None


class Data(BaseNodeData):
    model: ModelConfig
    # Chat mode: a list of messages; completion mode: one `{text}` object.
    prompt_template: list[PromptMessage] | PromptMessage = Field(default_factory=list)
    prompt_config: PromptConfig = Field(default_factory=PromptConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    memory: MemoryConfig | None = None
    vision: VisionConfig = Field(default_factory=VisionConfig)
    structured_output_enabled: bool = False
    invocation: Invocation = Field(default_factory=Invocation)

    @model_validator(mode="after")
    def _unsupported_features(self) -> Data:
        # Refused by name rather than run without it.
        if self.structured_output_enabled:
            raise dsl_error(
                "dsl.node.structuredOutputUnsupported",
                "structured output is not supported yet; turn it off in this node",
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _legacy_gate_params(cls, raw: Any) -> Any:
        """Move gate keys out of completion_params; `invocation` wins over them."""
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

    @property
    def messages(self) -> list[PromptMessage]:
        template = self.prompt_template
        return [template] if isinstance(template, PromptMessage) else list(template)


def selectors(data: Data) -> list[Selector]:
    return prompt_selectors(
        data.messages, data.prompt_config, data.context, data.memory, data.vision
    )


def output_names(data: Data) -> set[str]:
    return {"text", "usage", "finish_reason"}


def needs(data: Data) -> Needs:
    return Needs(model_providers=frozenset({data.model.provider}), streams=frozenset({"text"}))


def messages_for(data: Data, ctx: NodeContext) -> list[dict[str, Any]]:
    return build_messages(
        data.messages,
        completion=data.model.mode == "completion",
        config=data.prompt_config,
        context=data.context,
        memory=data.memory,
        variables=ctx.variables,
        history=ctx.history,
        in_chat=bool(ctx.variables.get(("sys", "conversation_id"))),
        vision=data.vision,
        executor=ctx.code_executor,
        cancel=ctx.cancel,
    )


def seconds(ms: int | None) -> float | None:
    """Milliseconds from the DSL to the gate's seconds; 0 or empty disables."""
    return ms / 1000.0 if ms else None


def model_parameters(data: Data) -> tuple[dict[str, Any], list[str] | None]:
    params = {k: v for k, v in data.model.completion_params.items() if k not in GATE_PARAM_KEYS}
    stop = params.pop("stop", None)
    return params, (list(stop) if stop else None)


def _usage_dict(usage: Any) -> dict[str, Any] | None:
    if usage is None:
        return None
    if dataclasses.is_dataclass(usage) and not isinstance(usage, type):
        return dataclasses.asdict(usage)
    return {
        k: getattr(usage, k, None) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    }


def first_token_seconds(ms: int | None) -> float | None:
    """The node's first-token value for the budget resolver, in seconds.

    None ("auto" or empty) lets the next level decide; an explicit 0 stays 0,
    which the resolver turns into "disabled" (the gate's rule).
    """
    return None if ms is None else ms / 1000.0


@dataclasses.dataclass(slots=True)
class Reply:
    """What one attempt on one target streamed."""

    parts: list[str] = dataclasses.field(default_factory=list)
    usage: Any = None
    finish_reason: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)


@dataclasses.dataclass(frozen=True, slots=True)
class _Call:
    """The request every target of one node attempt gets, and the node's context."""

    data: Data
    ctx: NodeContext
    messages: list[dict[str, Any]]
    parameters: dict[str, Any]
    stop: list[str] | None
    prompt_tokens: int


def _stream(call: _Call, target: RouteTarget) -> Reply:
    """Stream one reply from `target` (inside a gate the caller opened)."""
    reply = Reply()
    for chunk in target.client.invoke_llm(
        model=call.data.model.name,
        messages=call.messages,
        parameters=call.parameters,
        stop=call.stop,
    ):
        if chunk.text:
            reply.parts.append(chunk.text)
            call.ctx.emit_chunk(chunk.text, target=target.name)
        if chunk.finish_reason:
            reply.finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            reply.usage = chunk.usage
    return reply


@contextmanager
def _gate(call: _Call, target: RouteTarget, budget: ResolvedBudget) -> Iterator[Gate]:
    """This target's own gate: its resolved first-token budget, its probe, and the
    run's cancel token attached, so an abort shuts down whichever attempt is in flight."""
    from plugin_daemon_client import first_token_gate

    invocation = call.data.invocation

    def on_wait(info: WaitInfo) -> None:
        call.ctx.emit_wait(info, target=target.name)

    with (
        first_token_gate(
            idle_timeout=seconds(invocation.idle_timeout_ms),
            stream_total_timeout=seconds(invocation.stream_total_timeout_ms),
            on_wait=on_wait,
            probe=target.probe,
            **budget.gate_kwargs(),
        ) as gate,
        call.ctx.cancel.attached(gate.cancel),
    ):
        yield gate


def resolve_budgets(call: _Call, plan: RoutePlan) -> dict[str, ResolvedBudget]:
    """The first-token budget of every target, each with its own route's settings.

    Resolved before the first request: a bad environment setting fails the node
    at once instead of after the primary already failed.
    """
    from plugin_daemon_client.first_token_budget import resolve_first_token_budget

    node_value = first_token_seconds(call.data.invocation.first_token_timeout_ms)
    return {
        target.name: resolve_first_token_budget(
            node_value,
            prompt_tokens=call.prompt_tokens,
            route=target.budget_settings,
            route_name=target.name,
        )
        for target in plan.targets
    }


@dataclasses.dataclass(frozen=True, slots=True)
class _Answered:
    reply: Reply
    target: str
    failures: tuple[tuple[str, str], ...]  # (target, error type) of the targets before it


def _bind(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    return lambda: fn(*args)


def _run_chain(call: _Call, plan: RoutePlan, budgets: dict[str, ResolvedBudget]) -> _Answered:
    """Walk the fallback chain; errors (exhausted, budget, non-transient) propagate
    unchanged to the error strategy, and a retry walks the chain again."""
    from plugin_daemon_client.fallback import FallbackChain, Target

    for warning in plan.warnings:
        call.ctx.emit_fallback(warning)
    targets: list[Target[Reply]] = []
    for target in plan.targets:
        open_gate: Callable[[], AbstractContextManager[Gate]] = _bind(
            _gate, call, target, budgets[target.name]
        )
        targets.append(
            Target(
                target.name,
                attempt=_bind(_stream, call, target),
                base_url=target.base_url,
                open_gate=open_gate,
                probe=target.probe,
                allow_same_host_fallback=target.allow_same_host_fallback,
            )
        )
    chain = FallbackChain(
        targets, plan.policy, breakers=plan.breakers, on_event=call.ctx.emit_fallback
    )
    result = chain.run()
    failures = tuple((name, error.error_type) for name, error in result.attempts)
    return _Answered(result.value, result.target, failures)


def _process_data(
    call: _Call, budgets: dict[str, ResolvedBudget], answered: _Answered
) -> dict[str, Any]:
    return {
        "route": answered.target,
        "prompt_tokens_estimate": call.prompt_tokens,
        "first_token_budget": {
            name: {
                "seconds": budget.first_token_s,
                "source": budget.source,
                "ceiling_s": budget.ceiling_s,
                "ceiling_source": budget.ceiling_source,
            }
            for name, budget in budgets.items()
        },
        "fallback_failures": [
            {"target": name, "error_type": kind} for name, kind in answered.failures
        ],
    }


def run(data: Data, ctx: NodeContext) -> NodeResult:
    from plugin_daemon_client.first_token_budget import estimate_prompt_tokens

    if ctx.clients is None:
        raise NodeRunError("dsl.node.noModelRoute")
    messages = messages_for(data, ctx)
    parameters, stop = model_parameters(data)
    plan = plan_for(ctx.clients, data.model.provider)
    call = _Call(data, ctx, messages, parameters, stop, estimate_prompt_tokens(messages))
    budgets = resolve_budgets(call, plan)
    if plan.fallbacks:
        answered = _run_chain(call, plan, budgets)
    else:
        # No chain: one gate, still with the route's probe and the resolved budget.
        with _gate(call, plan.primary, budgets[plan.primary.name]):
            answered = _Answered(_stream(call, plan.primary), plan.primary.name, ())
    reply = answered.reply
    usage = _usage_dict(reply.usage)
    return NodeResult(
        outputs={"text": reply.text, "usage": usage, "finish_reason": reply.finish_reason},
        usage=usage,
        process_data={
            "model_mode": data.model.mode,
            "model_provider": data.model.provider,
            "model_name": data.model.name,
            "prompts": shown_prompt(messages),
            **_process_data(call, budgets, answered),
        },
    )
