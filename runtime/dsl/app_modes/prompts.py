"""An easy-mode app's prompt as the LLM node's fields, assembled the way Dify's
simple and advanced prompt transforms assemble it.

Simple prompts (`pre_prompt`):

- chat model: one system message (the knowledge context block, when the app
  has datasets, then the pre-prompt), then in a chat app every earlier turn
  (memory, no window) and the user's query; a completion app's one message is
  that text as the user's;
- completion model: one text: the context block, the pre-prompt, in a chat
  app the conversation (`<histories>`) and `Human: <query>` / `Assistant: `
  with the stop words `\\nHuman:` and `</histories>`.

Advanced prompts are the app's own messages (`chat_prompt_config`) or text
(`completion_prompt_config`, with `{{#histories#}}` and its role prefixes);
chat apps add memory and the query as Dify does.

In the app's text, `{{name}}` is the input `name` (when the form declares it;
otherwise it stays as written, as in Dify), `{{#context#}}` the retrieved
knowledge, `{{#query#}}` the user's message and `{{#histories#}}` the
conversation. The wording of the context and histories blocks is firstgate's;
their structure (XML-tagged blocks, the order) is Dify's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from firstgate.runtime.dsl.app_modes.model_config import ModelConfigSection

START = "start"
CONTEXT = "{{#context#}}"
HISTORIES = "{{#histories#}}"
QUERY = "{{#sys.query#}}"
# Dify's variable syntax in an app's prompt (`PromptTemplateParser`).
_VARIABLE = re.compile(r"\{\{([a-zA-Z_][a-zA-Z0-9_]{0,29}|#histories#|#query#|#context#)\}\}")

CONTEXT_BLOCK = (
    "Use the knowledge between the <context></context> XML tags below as what you know.\n\n"
    f"<context>\n{CONTEXT}\n</context>\n\n"
    "When you answer the user:\n"
    "- If you do not know, say that you do not know.\n"
    "- If you are not sure, ask for clarification.\n"
    "Do not mention that the knowledge came from a context.\n"
    "Answer in the language of the user's question.\n\n"
)
HISTORIES_BLOCK = (
    "The conversation so far between the human and the assistant is between the "
    "<histories></histories> XML tags.\n\n"
    f"<histories>\n{HISTORIES}\n</histories>\n\n"
)
QUERY_BLOCK = f"\n\nHuman: {QUERY}\n\nAssistant: "
CHAT_COMPLETION_STOPS = ["\nHuman:", "</histories>"]


@dataclass(frozen=True, slots=True)
class Prompt:
    """The LLM node's prompt fields: `prompt_template`, `memory`, extra stop words."""

    template: list[dict[str, Any]] | dict[str, Any]
    memory: dict[str, Any] | None = None
    stops: list[str] = field(default_factory=list)


def variables_of(config: ModelConfigSection) -> set[str]:
    """The inputs the app's form declares."""
    names = (
        str(spec.get("variable", "")) for item in config.user_input_form for spec in item.values()
    )
    return {name for name in names if name}


def app_text(text: str, inputs: set[str], *, chat: bool) -> str:
    """The app's `{{name}}` syntax in the LLM node's: `{{#start.name#}}`, the query."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "#query#":
            return QUERY if chat else ""
        if name == "#histories#":
            return match.group(0) if chat else ""
        if name == "#context#":
            return match.group(0)
        return f"{{{{#{START}.{name}#}}}}" if name in inputs else match.group(0)

    return _VARIABLE.sub(replace, text)


def _memory(user: str = "Human", assistant: str = "Assistant") -> dict[str, Any]:
    # Dify gives a chat app every earlier turn (its token limit aside): no window.
    return {
        "window": {"enabled": False},
        "role_prefix": {"user": user, "assistant": assistant},
        "query_prompt_template": QUERY,
    }


def build_prompt(config: ModelConfigSection, *, chat: bool, has_context: bool) -> Prompt:
    inputs = variables_of(config)
    completion_model = config.model.mode == "completion"
    if config.prompt_type == "advanced":
        return _advanced(config, inputs, chat=chat, completion_model=completion_model)
    pre_prompt = app_text(config.pre_prompt, inputs, chat=chat)
    head = (CONTEXT_BLOCK if has_context else "") + (f"{pre_prompt}\n" if pre_prompt else "")
    if completion_model:
        if chat:
            text = head + HISTORIES_BLOCK + QUERY_BLOCK
            return Prompt({"text": text}, _memory(), list(CHAT_COMPLETION_STOPS))
        return Prompt({"text": head})
    if chat:
        return Prompt([{"role": "system", "text": head}], _memory())
    return Prompt([{"role": "user", "text": head}])


def _advanced(
    config: ModelConfigSection, inputs: set[str], *, chat: bool, completion_model: bool
) -> Prompt:
    if completion_model:
        prompt = config.completion_prompt_config
        text = app_text(prompt.prompt.text, inputs, chat=chat)
        if not chat:
            return Prompt({"text": text})
        roles = prompt.conversation_histories_role
        # A completion model's query is where the text puts it (`{{#query#}}`).
        return Prompt({"text": text}, _memory(roles.user_prefix, roles.assistant_prefix))
    messages = [
        {"role": m.role, "text": app_text(m.text, inputs, chat=chat)}
        for m in config.chat_prompt_config.prompt
    ]
    return Prompt(messages, _memory() if chat else None)
