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
    NodeContext,
    NodeResult,
    NodeRunError,
    RoutePlan,
    RouteTarget,
    VariableReader,
    plan_for,
    render_selectors,
    to_text,
)
from nodes.config import (
    BaseNodeData,
    DslModel,
    Milliseconds,
    SelectorField,
    dsl_error,
    shown,
)
from nodes.jinja import checked_template, render_jinja
from nodes.rendering import TextBudget
from nodes.selectors import Selector, template_selectors
from plugin_daemon_client.durations import DurationError, parse_duration

if TYPE_CHECKING:
    from plugin_daemon_client.first_token_budget import ResolvedBudget
    from plugin_daemon_client.gate import Gate, WaitInfo
    from sandbox.executor import Cancellable, CodeExecutor

TYPE = "llm"
SUPPORTS_RETRY = True

# Gate budgets that older flows wrote into completion_params. They are never
# sent to the model; `invocation` wins when both are present.
GATE_PARAM_KEYS = ("first_token_timeout_ms", "idle_timeout_ms", "stream_total_timeout_ms")
CONTEXT_PLACEHOLDER = "{{#context#}}"


class ModelConfig(DslModel):
    provider: str = Field(min_length=1)
    name: str = Field(min_length=1)
    mode: Literal["chat", "completion"] = "chat"
    completion_params: dict[str, Any] = Field(default_factory=dict)


class PromptMessage(DslModel):
    role: Literal["system", "user", "assistant"] = "user"
    text: str = ""
    edition_type: Literal["basic", "jinja2"] = "basic"
    jinja2_text: str | None = None

    @model_validator(mode="after")
    def _jinja_compiles(self) -> PromptMessage:
        # Checked only where it is used: the editor keeps a stale jinja2_text
        # around when a message is switched back to basic.
        if self.edition_type == "jinja2":
            checked_template(self.jinja2_text or "")
        return self


class Jinja2Variable(DslModel):
    variable: str = Field(min_length=1)
    value_selector: SelectorField


class PromptConfig(DslModel):
    jinja2_variables: list[Jinja2Variable] = Field(default_factory=list)


class ContextConfig(DslModel):
    enabled: bool = False
    variable_selector: SelectorField | None = None


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
    invocation: Invocation = Field(default_factory=Invocation)

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
    found: list[Selector] = []
    for message in data.messages:
        if message.edition_type == "basic":
            found.extend(template_selectors(message.text))
    found.extend(v.value_selector for v in data.prompt_config.jinja2_variables)
    if data.context.enabled and data.context.variable_selector:
        found.append(data.context.variable_selector)
    return found


def output_names(data: Data) -> set[str]:
    return {"text", "usage", "finish_reason"}


def _context_text(value: Any) -> str:
    # Knowledge-retrieval results are a list of {content: ...} records.
    if isinstance(value, list):
        return "\n".join(
            str(item.get("content", "")) if isinstance(item, dict) else to_text(item)
            for item in value
        )
    return to_text(value)


def build_messages(
    data: Data,
    variables: VariableReader,
    executor: CodeExecutor | None = None,
    cancel: Cancellable | None = None,
) -> list[dict[str, str]]:
    """The prompt's messages, rendered against one cap for the whole prompt.

    The context (`{{#context#}}`) goes in as text: a retrieved document that
    contains `{{#env.SECRET#}}` is not a template and does not pull variables in.
    Jinja2 messages that need it render in the code sandbox (`executor`).
    """
    context = ""
    if data.context.enabled and data.context.variable_selector:
        context = _context_text(variables.get(data.context.variable_selector))
    jinja_values = {
        v.variable: variables.get(v.value_selector) for v in data.prompt_config.jinja2_variables
    }
    budget = TextBudget()
    messages: list[dict[str, str]] = []
    for message in data.messages:
        if message.edition_type == "jinja2":
            content = render_jinja(
                message.jinja2_text or "", jinja_values, executor=executor, cancel=cancel
            )
            budget.charge(len(content))
        else:
            pieces: list[str] = []
            for index, part in enumerate(message.text.split(CONTEXT_PLACEHOLDER)):
                if index:
                    budget.charge(len(context))
                    pieces.append(context)
                pieces.append(render_selectors(part, variables, budget))
            content = "".join(pieces)
        role = "user" if data.model.mode == "completion" else message.role
        messages.append({"role": role, "content": content})
    if not messages:
        raise NodeRunError("dsl.node.emptyPrompt")
    return messages


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
    messages: list[dict[str, str]]
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
    messages = build_messages(data, ctx.variables, ctx.code_executor, ctx.cancel)
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
        process_data=_process_data(call, budgets, answered),
    )
