"""LLM node: renders the prompt (`nodes.llm_prompt`), streams the reply along
the invoke path (`nodes.model_call`) and returns the text. Errors propagate:
the engine's error handler decides between retry, fail-branch and default value."""

from __future__ import annotations

from typing import Any

from firstgate.common.dsl import DslModel, dsl_error
from firstgate.nodes.base import Needs, NodeContext, NodeResult, RouteTarget
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.llm.prompt import (
    ContextConfig,
    MemoryConfig,
    PromptBudget,
    PromptConfig,
    PromptMessage,
    VisionConfig,
    build_messages,
    prompt_selectors,
    shown_prompt,
)
from firstgate.nodes.llm.structured_output import parse_and_validate, schema_problem
from firstgate.nodes.model_call import (
    Invocation,
    ModelConfig,
    call_model,
    move_legacy_gate_params,
    route_plan,
)
from firstgate.nodes.retriever_resources import from_context
from firstgate.nodes.selectors import Selector
from firstgate.nodes.spec import NodeSpec
from firstgate.plugin_daemon_client.invoke import ModelRequest
from pydantic import Field, model_validator


class StructuredOutput(DslModel):
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")


class Data(BaseNodeData):
    model: ModelConfig
    # Chat mode: a list of messages; completion mode: one `{text}` object.
    prompt_template: list[PromptMessage] | PromptMessage = Field(default_factory=list)
    prompt_config: PromptConfig = Field(default_factory=PromptConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    memory: MemoryConfig | None = None
    vision: VisionConfig = Field(default_factory=VisionConfig)
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
    return prompt_selectors(
        data.messages, data.prompt_config, data.context, data.memory, data.vision
    )


def output_names(data: Data) -> set[str]:
    names = {"text", "usage", "finish_reason"}
    return names | {"structured_output"} if data.output_schema is not None else names


def needs(data: Data) -> Needs:
    schemas = () if data.output_schema is None else (data.output_schema,)
    return Needs(
        model_providers=frozenset({data.model.provider}),
        streams=frozenset({"text"}),
        json_schemas=schemas,
    )


def messages_for(
    data: Data, ctx: NodeContext, target: RouteTarget | None = None
) -> list[dict[str, Any]]:
    """The prompt, built against `target`'s `max_prompt_bytes` (the route that
    will get it; without one the default bound)."""
    budget = PromptBudget(target.max_prompt_bytes, target.name) if target is not None else None
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
        budget=budget,
    )


def run(data: Data, ctx: NodeContext) -> NodeResult:
    plan = route_plan(ctx, data.model.provider)
    messages = messages_for(data, ctx, plan.primary)
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
    reply = call_model(ctx, data.model.provider, request, stream_text=True, plan=plan)
    usage = reply.usage_dict()
    outputs: dict[str, Any] = {
        "text": reply.text,
        "usage": usage,
        "finish_reason": reply.finish_reason,
    }
    if schema is not None:
        outputs["structured_output"] = parse_and_validate(schema, reply.text)
    context = data.context.selector
    return NodeResult(
        outputs=outputs,
        usage=usage,
        retriever_resources=from_context(ctx.variables.get(context)) if context else (),
        process_data={
            "model_mode": data.model.mode,
            "model_provider": data.model.provider,
            "model_name": data.model.name,
            "prompts": shown_prompt(messages),
            **reply.process_data(),
        },
    )


SPEC = NodeSpec(
    type="llm",
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=True,
    needs=needs,
)
