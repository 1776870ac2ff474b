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
from nodes.config import BaseNodeData, DslModel, SelectorField, dsl_error
from nodes.jinja import checked_template, render_jinja
from nodes.model_call import Invocation, ModelConfig, call_model, move_legacy_gate_params
from nodes.rendering import TextBudget
from nodes.selectors import Selector, template_selectors
from nodes.structured_output import parse_and_validate, schema_problem
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


class StructuredOutput(DslModel):
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")


class Data(BaseNodeData):
    model: ModelConfig
    # Chat mode: a list of messages; completion mode: one `{text}` object.
    prompt_template: list[PromptMessage] | PromptMessage = Field(default_factory=list)
    prompt_config: PromptConfig = Field(default_factory=PromptConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    invocation: Invocation = Field(default_factory=Invocation)
    # Dify writes `structured_output_enabled`; graphon calls it `structured_output_switch_on`.
    structured_output_enabled: bool = False
    structured_output: StructuredOutput | None = None

    @model_validator(mode="before")
    @classmethod
    def _legacy_gate_params(cls, raw: Any) -> Any:
        """Move gate keys out of completion_params; `invocation` wins over them."""
        raw = move_legacy_gate_params(raw)
        if isinstance(raw, dict) and "structured_output_switch_on" in raw:
            raw = dict(raw)
            switch = raw.pop("structured_output_switch_on")
            raw.setdefault("structured_output_enabled", switch)
        return raw

    @model_validator(mode="after")
    def _schema_usable(self) -> Data:
        if not self.structured_output_enabled:
            return self
        schema = self.structured_output.schema_ if self.structured_output else None
        if schema is None:
            raise dsl_error(
                "dsl.llm.structuredNoSchema", "structured output is on but there is no schema"
            )
        problem = schema_problem(schema)
        if problem is not None:
            raise dsl_error(
                "dsl.llm.structuredSchema",
                "the structured output schema is not valid JSON Schema: {detail}",
                detail=problem,
            )
        return self

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON schema the answer must match, when structured output is on."""
        if not self.structured_output_enabled or self.structured_output is None:
            return None
        return self.structured_output.schema_

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
    names = {"text", "usage", "finish_reason"}
    return names | {"structured_output"} if data.output_schema is not None else names


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
    schema = data.output_schema
    request = ModelRequest(
        data.model.name,
        messages,
        parameters,
        stop,
        # The answer's shape: the response format where the route takes a
        # schema (a grammar on llama-server), else an instruction in the prompt.
        json_schema=schema,
        schema_in_prompt=True,
        budgets=data.invocation.budgets(),
    )
    reply = call_model(ctx, data.model.provider, request, stream_text=True)
    outputs: dict[str, Any] = {
        "text": reply.text,
        "usage": reply.usage_dict(),
        "finish_reason": reply.finish_reason,
    }
    if schema is not None:
        outputs["structured_output"] = parse_and_validate(schema, reply.text)
    return NodeResult(outputs=outputs, process_data=reply.process_data())
