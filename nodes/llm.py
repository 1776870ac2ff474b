"""LLM node: renders the prompt (`nodes.llm_prompt`), streams the reply along
the invoke path (`nodes.model_call`) and returns the text. Errors propagate:
the engine's error handler decides between retry, fail-branch and default value."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from nodes.base import Needs, NodeContext, NodeResult
from nodes.config import BaseNodeData, dsl_error
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
from nodes.model_call import Invocation, ModelConfig, call_model, move_legacy_gate_params
from nodes.selectors import Selector
from plugin_daemon_client.invoke import ModelRequest

TYPE = "llm"
SUPPORTS_RETRY = True


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
        return move_legacy_gate_params(raw)

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


def run(data: Data, ctx: NodeContext) -> NodeResult:
    messages = messages_for(data, ctx)
    parameters, stop = data.model.parameters()
    request = ModelRequest(
        data.model.name, messages, parameters, stop, budgets=data.invocation.budgets()
    )
    reply = call_model(ctx, data.model.provider, request, stream_text=True)
    usage = reply.usage_dict()
    return NodeResult(
        outputs={"text": reply.text, "usage": usage, "finish_reason": reply.finish_reason},
        usage=usage,
        process_data={
            "model_mode": data.model.mode,
            "model_provider": data.model.provider,
            "model_name": data.model.name,
            "prompts": shown_prompt(messages),
            **reply.process_data(),
        },
    )
