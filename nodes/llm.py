"""LLM node: renders the prompt, streams the reply through a first-token gate,
and returns the text. Errors propagate: the engine's error handler decides
between retry, fail-branch and default value."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from nodes.base import (
    NodeContext,
    NodeResult,
    NodeRunError,
    VariableReader,
    render_selectors,
    to_text,
)
from nodes.config import BaseNodeData, DslModel, SelectorField
from nodes.jinja import checked_template, render_jinja
from nodes.model_call import Invocation, ModelConfig, call_model, move_legacy_gate_params
from nodes.rendering import TextBudget
from nodes.selectors import Selector, template_selectors
from plugin_daemon_client.invoke import ModelRequest

if TYPE_CHECKING:
    from sandbox.executor import Cancellable, CodeExecutor

TYPE = "llm"
SUPPORTS_RETRY = True

CONTEXT_PLACEHOLDER = "{{#context#}}"


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
        return move_legacy_gate_params(raw)

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


def model_providers(data: Data) -> set[str]:
    return {data.model.provider}


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


def run(data: Data, ctx: NodeContext) -> NodeResult:
    messages = build_messages(data, ctx.variables, ctx.code_executor, ctx.cancel)
    parameters, stop = data.model.parameters()
    request = ModelRequest(
        data.model.name, messages, parameters, stop, budgets=data.invocation.budgets()
    )
    reply = call_model(ctx, data.model.provider, request, stream_text=True)
    return NodeResult(
        outputs={
            "text": reply.text,
            "usage": reply.usage_dict(),
            "finish_reason": reply.finish_reason,
        },
        process_data=reply.process_data(),
    )
