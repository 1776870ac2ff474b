"""Parameter extractor: asks the model for the node's parameters found in a
text, checks and coerces them by their declared types.

Fields (Dify's): `query` (a selector), `parameters` (`name`, `type`:
string / number / boolean (or `bool`) / select / array[string] /
array[number] / array[object] / array[boolean], `description`, `required`,
`options`), `instruction` (a template), `reasoning_mode` (`function_call`,
the default, or `prompt`), `model`, `memory` (in a conversation: the earlier
turns go into the system prompt), `vision` (image files go with the last
user message, as on the LLM node); and firstgate's `invocation` (the gate's
budgets). Outputs: one per parameter, plus
`__is_success` (1 or 0), `__reason` (None, or why not) and `__usage`.

`function_call`: the request carries one OpenAI tool, `extract_parameters`,
whose arguments schema is the parameters'; its call's arguments are the
answer (a chat model that answers in text instead is read like `prompt`).
`prompt`: the model is asked for the JSON object itself, and a route that
takes a JSON schema gets the parameters' schema as the response format
(llama-server turns it into a grammar, so a tiny local model answers
parseably). A completion-mode model is always asked in `prompt` style.
Either way it is one non-streamed call through the invoke path.

When the answer does not parse (Dify's behaviour, from its tests): the node
still succeeds, with every scalar parameter at its empty value, arrays
empty, `__is_success: 0` and the reason; a JSON answer that does not fit
(a count, a required parameter, a type, an option) is `__is_success: 0` with
the first problem as `__reason`, and the values coerced anyway
(`nodes/parameter_extractor/values.py`). Transport errors (a first-token timeout, a
server error) are not answers: they go to the node's retry and error strategy.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from firstgate.common.dsl import DslModel, dsl_error, shown
from firstgate.nodes.base import Needs, NodeContext, NodeResult
from firstgate.nodes.config import BaseNodeData, SelectorField
from firstgate.nodes.llm.json_answer import read_json_object
from firstgate.nodes.llm.prompt import (
    MemoryConfig,
    VisionConfig,
    attach_vision,
    shown_prompt,
    vision_selectors,
)
from firstgate.nodes.model_call import (
    Invocation,
    ModelConfig,
    call_model,
    memory_text,
    move_legacy_gate_params,
)
from firstgate.nodes.parameter_extractor.values import (
    LEGACY_TYPES,
    PARAMETER_TYPES,
    ExtractionProblem,
    Parameter,
    check,
    coerce,
    fallback_result,
    json_schema,
)
from firstgate.nodes.selectors import Selector, template_selectors
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.values import as_text, render_text
from firstgate.plugin_daemon_client.invoke import ModelReply, ModelRequest
from firstgate.plugin_daemon_client.protocols import ToolSpec
from pydantic import BeforeValidator, Field, field_validator, model_validator

RESERVED = ("__reason", "__is_success", "__usage")
FUNCTION_NAME = "extract_parameters"
FUNCTION_DESCRIPTION = "Extract parameters from the natural language text"


def _parameter_type(value: Any) -> Any:
    value = LEGACY_TYPES.get(value, value) if isinstance(value, str) else value
    if value not in PARAMETER_TYPES:
        raise dsl_error(
            "dsl.extractor.type",
            "parameter type {got} is not one of {known}",
            got=shown(value),
            known=", ".join(PARAMETER_TYPES),
        )
    return value


class ParameterConfig(DslModel):
    name: str = Field(min_length=1)
    type: Annotated[str, BeforeValidator(_parameter_type)]
    description: str = ""
    required: bool = False
    options: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if name in RESERVED:
            raise dsl_error(
                "dsl.extractor.reserved",
                "{name} is reserved for the node's own outputs",
                name=shown(name),
            )
        return name

    @field_validator("options", mode="before")
    @classmethod
    def _no_options(cls, value: Any) -> Any:
        return [] if value is None else value

    def parameter(self) -> Parameter:
        return Parameter(self.name, self.type, self.description, self.required, tuple(self.options))


class Data(BaseNodeData):
    model: ModelConfig
    query: SelectorField
    parameters: list[ParameterConfig] = Field(min_length=1)
    instruction: str = ""
    reasoning_mode: Literal["function_call", "prompt"] = "function_call"
    memory: MemoryConfig | None = None
    vision: VisionConfig = Field(default_factory=VisionConfig)
    invocation: Invocation = Field(default_factory=Invocation)

    @model_validator(mode="before")
    @classmethod
    def _before(cls, raw: Any) -> Any:
        raw = move_legacy_gate_params(raw)
        if isinstance(raw, dict) and not raw.get("reasoning_mode"):
            raw = {**raw, "reasoning_mode": "function_call"}  # the editor writes null
        if isinstance(raw, dict) and raw.get("instruction") is None:
            raw = {**raw, "instruction": ""}
        return raw

    @model_validator(mode="after")
    def _checks(self) -> Data:
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise dsl_error(
                "dsl.extractor.duplicate",
                "parameter names must be unique, got {names}",
                names=shown(names),
            )
        return self

    def typed(self) -> list[Parameter]:
        return [p.parameter() for p in self.parameters]


def selectors(data: Data) -> list[Selector]:
    return [data.query, *template_selectors(data.instruction), *vision_selectors(data.vision)]


def needs(data: Data) -> Needs:
    # Its reply is JSON for itself, not text for an answer: nothing streams.
    return Needs(model_providers=frozenset({data.model.provider}))


def output_names(data: Data) -> set[str]:
    return {p.name for p in data.parameters} | set(RESERVED)


# --- the prompt ----------------------------------------------------------------------

FUNCTION_SYSTEM = (
    "You extract structured information from a text. Call the function "
    f"{FUNCTION_NAME} with the values the text gives for its parameters. Use only what "
    "the text says."
)
PROMPT_SYSTEM = (
    "You extract structured information from a text. Answer with one JSON object whose "
    "keys are the parameters of the JSON schema you are given and whose values are what "
    "the text says, and write nothing else (no explanation, no code fence)."
)
INSTRUCTION = "\n\nFollow these instructions:\n{instruction}"
HISTORY = "\n\nThe conversation so far:\n{history}"
EXAMPLE_TEXT = "Please book a table for 4 people at 7pm on Friday."
EXAMPLE_SCHEMA = {
    "type": "object",
    "properties": {
        "people": {"type": "number", "description": "how many guests"},
        "day": {"type": "string", "description": "the day of the booking"},
    },
    "required": ["people", "day"],
}
EXAMPLE_ANSWER = {"people": 4, "day": "Friday"}


def _user_text(text: str, schema: dict[str, Any]) -> str:
    return (
        f"Text:\n{text}\n\nThe parameters to extract, as a JSON schema:\n"
        f"{json.dumps(schema, ensure_ascii=False)}"
    )


def _system(base: str, instruction: str, history: str) -> str:
    system = base
    if instruction.strip():
        system += INSTRUCTION.format(instruction=instruction)
    if history.strip():
        system += HISTORY.format(history=history)
    return system


def uses_function(data: Data) -> bool:
    return data.reasoning_mode == "function_call" and data.model.mode == "chat"


def build_messages(
    data: Data, query: str, instruction: str, history: str = ""
) -> list[dict[str, Any]]:
    schema = json_schema(data.typed())
    if uses_function(data):
        return [
            {"role": "system", "content": _system(FUNCTION_SYSTEM, instruction, history)},
            {"role": "user", "content": _user_text(query, schema)},
        ]
    system = _system(PROMPT_SYSTEM, instruction, history)
    example_question = _user_text(EXAMPLE_TEXT, EXAMPLE_SCHEMA)
    example_answer = json.dumps(EXAMPLE_ANSWER)
    question = _user_text(query, schema)
    if data.model.mode == "completion":
        text = f"{system}\n\n{example_question}\nAnswer: {example_answer}\n\n{question}\nAnswer:"
        return [{"role": "user", "content": text}]
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": example_question},
        {"role": "assistant", "content": example_answer},
        {"role": "user", "content": question},
    ]


def build_request(data: Data, messages: list[dict[str, Any]]) -> ModelRequest:
    parameters, stop = data.model.parameters()
    schema = json_schema(data.typed())
    if uses_function(data):
        tool = ToolSpec(FUNCTION_NAME, FUNCTION_DESCRIPTION, schema)
        return ModelRequest(
            data.model.name,
            messages,
            parameters,
            stop,
            tools=(tool,),
            stream=False,
            budgets=data.invocation.budgets(),
        )
    return ModelRequest(
        data.model.name,
        messages,
        parameters,
        stop,
        json_schema=schema,
        stream=False,
        budgets=data.invocation.budgets(),
    )


# --- reading the answer -----------------------------------------------------------------


def answer_of(reply: ModelReply) -> dict[str, Any] | None:
    """The JSON object answered: the first tool call's arguments, else the text."""
    if reply.tool_calls:
        return read_json_object(reply.tool_calls[0].arguments)
    return read_json_object(reply.text)


def outcome(parameters: list[Parameter], found: dict[str, Any] | None) -> tuple[dict, str | None]:
    """(the parameter values, the reason the extraction is not a success or None)."""
    reason: str | None = None
    result = found
    if result is None:
        result = fallback_result(parameters)
        reason = str(ExtractionProblem("errors.extractor.noJson"))
    try:
        check(parameters, result)
    except ExtractionProblem as problem:
        reason = str(problem)
    return coerce(parameters, result), reason


def run(data: Data, ctx: NodeContext) -> NodeResult:
    query = as_text(ctx.variables.get(data.query))
    instruction = render_text(data.instruction, ctx.variables)
    messages = build_messages(data, query, instruction, memory_text(data.memory, ctx))
    attach_vision(messages, data.vision, ctx.variables)
    request = build_request(data, messages)
    reply = call_model(ctx, data.model.provider, request, stream_text=False)
    values, reason = outcome(data.typed(), answer_of(reply))
    usage = reply.usage_dict()
    function = request.tools[0] if request.tools else None
    return NodeResult(
        usage=usage,
        outputs={
            **values,
            "__is_success": 0 if reason else 1,
            "__reason": reason,
            "__usage": usage,
        },
        process_data={
            "model_mode": data.model.mode,
            "model_provider": data.model.provider,
            "model_name": data.model.name,
            "reasoning_mode": "function_call" if function else "prompt",
            "prompts": shown_prompt(messages),
            "function": {} if function is None else {"name": function.name},
            "tool_call": (
                None
                if not reply.tool_calls
                else {"name": reply.tool_calls[0].name, "arguments": reply.tool_calls[0].arguments}
            ),
            "llm_text": reply.text,
            "usage": usage,
            **reply.process_data(),
        },
    )


SPEC = NodeSpec(
    type="parameter-extractor",
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=True,
    needs=needs,
)
