"""Question classifier: asks the model which of the node's classes a text
belongs to, and takes the edge of that class (the edge whose `sourceHandle`
is the class id).

Fields (Dify's): `query_variable_selector`, `classes` (`id`, `name`, an
optional `label`; names may hold `{{#node.var#}}`), `instruction` (a
template), `model`, `memory` (in a conversation: the earlier turns go into the
system prompt), `vision` (image files go with the last user message, as on
the LLM node); and firstgate's `invocation` (the gate's budgets, as on the LLM
node). Outputs: `class_name`, `class_id`,
`class_label` (the class's label, or `CLASS n`), `usage`.

The call goes through the invoke path as one non-streamed request for a JSON
object `{"category_id", "category_name"}`; a route that takes a JSON schema
gets one whose `category_id` can only be one of the class ids (llama-server
turns it into a grammar, so even a tiny local model answers parseably).

When the answer does not parse (Dify's behaviour, from its tests): an answer
with no JSON object in it fails the node (`ClassifierAnswerError`, into the
node's retry and error strategy); a JSON answer that names no class takes
the first class. Beyond Dify: a `category_id` that is not a class id but a
`category_name` that names exactly one class takes that class.
"""

from __future__ import annotations

import json
from typing import Any

from firstgate.common.dsl import DslModel, dsl_error, shown
from firstgate.nodes.base import Needs, NodeContext, NodeResult, NodeRunError, Role
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
from firstgate.nodes.selectors import Selector, template_selectors
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.values import as_text, render_text
from firstgate.plugin_daemon_client.invoke import ModelRequest
from pydantic import Field, model_validator


class ClassifierAnswerError(NodeRunError):
    """The model's answer held no JSON object."""


class ClassConfig(DslModel):
    id: str = Field(min_length=1)
    name: str = ""
    label: str = ""


class Data(BaseNodeData):
    query_variable_selector: SelectorField
    model: ModelConfig
    classes: list[ClassConfig] = Field(min_length=1)
    instruction: str = ""
    memory: MemoryConfig | None = None
    vision: VisionConfig = Field(default_factory=VisionConfig)
    invocation: Invocation = Field(default_factory=Invocation)

    @model_validator(mode="before")
    @classmethod
    def _legacy_gate_params(cls, raw: Any) -> Any:
        return move_legacy_gate_params(raw)

    @model_validator(mode="after")
    def _checks(self) -> Data:
        ids = [c.id for c in self.classes]
        if len(set(ids)) != len(ids):
            raise dsl_error(
                "dsl.classifier.duplicateClass",
                "class ids must be unique, got {ids}",
                ids=shown(ids),
            )
        return self


def selectors(data: Data) -> list[Selector]:
    found: list[Selector] = [data.query_variable_selector]
    found.extend(template_selectors(data.instruction))
    for item in data.classes:
        found.extend(template_selectors(item.name))
    return [*found, *vision_selectors(data.vision)]


def needs(data: Data) -> Needs:
    # Its reply is JSON for itself, not text for an answer: nothing streams.
    return Needs(model_providers=frozenset({data.model.provider}))


def output_names(data: Data) -> set[str]:
    return {"class_name", "class_id", "class_label", "usage"}


def handles(data: Data) -> set[str]:
    return {c.id for c in data.classes}


def default_handles(data: Data, outputs: dict[str, Any]) -> frozenset[str]:
    """Under the default-value strategy: the class the default `class_id`
    names, else the first class (a branch node must take one branch)."""
    chosen = outputs.get("class_id")
    ids = handles(data)
    return frozenset({chosen if chosen in ids else data.classes[0].id})


# --- the prompt ---------------------------------------------------------------------

SYSTEM = (
    "You are a text classifier. Read the input text and choose the one category that "
    "fits it best. Answer with a single JSON object of the form "
    '{"category_id": "...", "category_name": "..."}, taking the id and the name from the '
    "category list, and write nothing else."
)
INSTRUCTION = "\n\nFollow these instructions when you classify:\n{instruction}"
HISTORY = "\n\nThe conversation so far:\n{history}"
EXAMPLE_CATEGORIES = [
    {"category_id": "weather", "category_name": "Weather"},
    {"category_id": "cooking", "category_name": "Cooking"},
]
EXAMPLE_INPUT = "How long should I boil an egg?"
EXAMPLE_ANSWER = {"category_id": "cooking", "category_name": "Cooking"}


def _user_text(categories: list[dict[str, str]], text: str) -> str:
    return f"Categories: {json.dumps(categories, ensure_ascii=False)}\nInput text: {text}"


def build_messages(
    data: Data, query: str, categories: list[dict[str, str]], instruction: str, history: str = ""
) -> list[dict[str, Any]]:
    system = SYSTEM
    if instruction.strip():
        system += INSTRUCTION.format(instruction=instruction)
    if history.strip():
        system += HISTORY.format(history=history)
    example = [
        {"role": "user", "content": _user_text(EXAMPLE_CATEGORIES, EXAMPLE_INPUT)},
        {"role": "assistant", "content": json.dumps(EXAMPLE_ANSWER)},
    ]
    final = {"role": "user", "content": _user_text(categories, query)}
    if data.model.mode == "completion":
        # One prompt: the example written out, then the question.
        shown_example = f"{example[0]['content']}\nAnswer: {example[1]['content']}"
        return [
            {
                "role": "user",
                "content": f"{system}\n\n{shown_example}\n\n{final['content']}\nAnswer:",
            }
        ]
    return [{"role": "system", "content": system}, *example, final]


def answer_schema(categories: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "category_id": {"type": "string", "enum": [c["category_id"] for c in categories]},
            "category_name": {"type": "string"},
        },
        "required": ["category_id", "category_name"],
    }


# --- reading the answer ----------------------------------------------------------------


def choose(classes: list[ClassConfig], names: list[str], answer: str) -> int:
    """The index of the class the answer names (see the module docstring)."""
    found = read_json_object(answer)
    if found is None:
        raise ClassifierAnswerError("errors.classifier.noJson", answer=shown(answer, 200))
    category_id = found.get("category_id")
    for index, item in enumerate(classes):
        if category_id is not None and str(category_id) == item.id:
            return index
    name = found.get("category_name")
    if isinstance(name, str) and name.strip():
        wanted = name.strip().casefold()
        matches = [i for i, n in enumerate(names) if n.strip().casefold() == wanted]
        if len(matches) == 1:
            return matches[0]
    return 0


def run(data: Data, ctx: NodeContext) -> NodeResult:
    query = as_text(ctx.variables.get(data.query_variable_selector))
    instruction = render_text(data.instruction, ctx.variables)
    names = [render_text(item.name, ctx.variables) for item in data.classes]
    categories = [
        {"category_id": item.id, "category_name": name}
        for item, name in zip(data.classes, names, strict=True)
    ]
    history = memory_text(data.memory, ctx)
    messages = build_messages(data, query, categories, instruction, history)
    attach_vision(messages, data.vision, ctx.variables)
    parameters, stop = data.model.parameters()
    request = ModelRequest(
        data.model.name,
        messages,
        parameters,
        stop,
        json_schema=answer_schema(categories),
        stream=False,
        budgets=data.invocation.budgets(),
    )
    reply = call_model(ctx, data.model.provider, request, stream_text=False)
    index = choose(data.classes, names, reply.text)
    chosen = data.classes[index]
    usage = reply.usage_dict()
    return NodeResult(
        outputs={
            "class_name": names[index],
            "class_id": chosen.id,
            "class_label": chosen.label or f"CLASS {index + 1}",
            "usage": usage,
        },
        handles=frozenset({chosen.id}),
        usage=usage,
        process_data={
            "model_mode": data.model.mode,
            "model_provider": data.model.provider,
            "model_name": data.model.name,
            "prompts": shown_prompt(messages),
            "usage": usage,
            "finish_reason": reply.finish_reason,
            "answer": reply.text,
            **reply.process_data(),
        },
    )


SPEC = NodeSpec(
    type="question-classifier",
    role=Role.BRANCH,  # takes the edge of one class
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=True,
    handles=handles,
    needs=needs,
    default_handles=default_handles,
)
