"""LLM node: renders the prompt, streams the reply through a first-token gate,
and returns the text. Errors propagate: the engine's error handler decides
between retry, fail-branch and default value."""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import Field, model_validator

from nodes.base import (
    NodeContext,
    NodeResult,
    NodeRunError,
    VariableReader,
    render_selectors,
    to_text,
)
from nodes.config import BaseNodeData, DslModel, Milliseconds, SelectorField, choice
from nodes.jinja import render_jinja
from nodes.selectors import Selector, template_selectors

TYPE = "llm"
SUPPORTS_RETRY = True

# Gate budgets that older flows wrote into completion_params. They are never
# sent to the model; `invocation` wins when both are present.
GATE_PARAM_KEYS = ("first_token_timeout_ms", "idle_timeout_ms", "stream_total_timeout_ms")
CONTEXT_PLACEHOLDER = "{{#context#}}"


class ModelConfig(DslModel):
    provider: str = Field(min_length=1)
    name: str = Field(min_length=1)
    mode: choice("chat", "completion") = "chat"  # type: ignore[valid-type]
    completion_params: dict[str, Any] = Field(default_factory=dict)


class PromptMessage(DslModel):
    role: choice("system", "user", "assistant") = "user"  # type: ignore[valid-type]
    text: str = ""
    edition_type: choice("basic", "jinja2") = "basic"  # type: ignore[valid-type]
    jinja2_text: str | None = None


class Jinja2Variable(DslModel):
    variable: str = Field(min_length=1)
    value_selector: SelectorField


class PromptConfig(DslModel):
    jinja2_variables: list[Jinja2Variable] = Field(default_factory=list)


class ContextConfig(DslModel):
    enabled: bool = False
    variable_selector: SelectorField | None = None


class Invocation(DslModel):
    """The gate's budgets, in milliseconds; empty or 0 disables a deadline."""

    first_token_timeout_ms: Milliseconds = None
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


def build_messages(data: Data, variables: VariableReader) -> list[dict[str, str]]:
    context = ""
    if data.context.enabled and data.context.variable_selector:
        context = _context_text(variables.get(data.context.variable_selector))
    jinja_values = {
        v.variable: variables.get(v.value_selector) for v in data.prompt_config.jinja2_variables
    }
    messages: list[dict[str, str]] = []
    for message in data.messages:
        if message.edition_type == "jinja2":
            content = render_jinja(message.jinja2_text or "", jinja_values)
        else:
            content = render_selectors(
                message.text.replace(CONTEXT_PLACEHOLDER, context), variables
            )
        role = "user" if data.model.mode == "completion" else message.role
        messages.append({"role": role, "content": content})
    if not messages:
        raise NodeRunError("dsl.node.emptyPrompt", "the LLM node has no prompt messages")
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


def run(data: Data, ctx: NodeContext) -> NodeResult:
    from plugin_daemon_client import first_token_gate

    if ctx.clients is None:
        raise NodeRunError("dsl.node.noModelRoute", "no model route is configured for LLM nodes")
    messages = build_messages(data, ctx.variables)
    parameters, stop = model_parameters(data)
    client = ctx.clients.client_for(data.model.provider)
    budgets = data.invocation
    parts: list[str] = []
    usage: Any = None
    finish_reason: str | None = None
    with (
        first_token_gate(
            first_token_timeout=seconds(budgets.first_token_timeout_ms),
            idle_timeout=seconds(budgets.idle_timeout_ms),
            stream_total_timeout=seconds(budgets.stream_total_timeout_ms),
            on_wait=ctx.emit_wait,
        ) as gate,
        ctx.cancel.attached(gate.cancel),
    ):
        for chunk in client.invoke_llm(
            model=data.model.name, messages=messages, parameters=parameters, stop=stop
        ):
            if chunk.text:
                parts.append(chunk.text)
                ctx.emit_chunk(chunk.text)
            if chunk.finish_reason:
                finish_reason = chunk.finish_reason
            if chunk.usage is not None:
                usage = chunk.usage
    return NodeResult(
        outputs={
            "text": "".join(parts),
            "usage": _usage_dict(usage),
            "finish_reason": finish_reason,
        },
        usage=_usage_dict(usage),
    )
