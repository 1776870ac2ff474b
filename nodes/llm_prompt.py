"""The LLM node's prompt, as Dify builds it: the template's messages (with the
knowledge context and Jinja2 messages), then in a chatflow the conversation's
earlier turns (the node's `memory`: a window of turns; role prefixes for
completion models) and the user's query (`query_prompt_template`, by default
`{{#sys.query#}}`). Messages that render empty are dropped, as Dify drops them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field

from nodes.base import ChatTurn, NodeRunError, VariableReader
from nodes.config import DslModel, OptionalSelector, SelectorField, between
from nodes.jinja import render_jinja
from nodes.selectors import Selector, template_selectors
from nodes.values import as_text, render_text

CONTEXT_PLACEHOLDER = "{{#context#}}"
HISTORIES_PLACEHOLDERS = ("{{#histories#}}", "#histories#")
DEFAULT_QUERY = "{{#sys.query#}}"
# Dify reads at most this many earlier turns when the window is off.
UNWINDOWED_TURNS = 500


class PromptMessage(DslModel):
    role: Literal["system", "user", "assistant"] = "user"
    text: str = ""
    edition_type: Literal["basic", "jinja2"] = "basic"
    jinja2_text: str | None = None


class Jinja2Variable(DslModel):
    variable: str = Field(min_length=1)
    value_selector: SelectorField


class PromptConfig(DslModel):
    jinja2_variables: list[Jinja2Variable] = Field(default_factory=list)


class ContextConfig(DslModel):
    enabled: bool = False
    variable_selector: OptionalSelector = None  # the editor writes [] until one is chosen

    @property
    def selector(self) -> Selector | None:
        return self.variable_selector if self.enabled else None


class MemoryWindow(DslModel):
    enabled: bool = False
    size: Annotated[int, between(1, 10_000)] | None = None


class RolePrefix(DslModel):
    user: str = ""
    assistant: str = ""


class MemoryConfig(DslModel):
    # Dify's editor writes no `enabled`; some generated exports write `false`.
    enabled: bool = True
    window: MemoryWindow = Field(default_factory=MemoryWindow)
    role_prefix: RolePrefix | None = None
    query_prompt_template: str | None = None

    @property
    def turns(self) -> int:
        if self.window.enabled and self.window.size:
            return self.window.size
        return UNWINDOWED_TURNS

    @property
    def query(self) -> str:
        return self.query_prompt_template or DEFAULT_QUERY


def prompt_selectors(
    messages: Sequence[PromptMessage],
    config: PromptConfig,
    context: ContextConfig,
    memory: MemoryConfig | None,
) -> list[Selector]:
    found: list[Selector] = []
    for message in messages:
        if message.edition_type == "basic":
            found.extend(template_selectors(message.text))
    found.extend(v.value_selector for v in config.jinja2_variables)
    if context.selector:
        found.append(context.selector)
    if memory is not None and memory.enabled:
        found.extend(template_selectors(memory.query))
    return found


def _context_text(value: Any) -> str:
    # Knowledge-retrieval results are a list of {content: ...} records.
    if isinstance(value, list):
        parts = [
            str(item.get("content", "")) if isinstance(item, dict) else as_text(item)
            for item in value
        ]
        return "\n".join(parts).strip()
    return as_text(value)


def _history_messages(history: Sequence[ChatTurn], turns: int) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    for turn in list(history)[-turns:]:
        messages.append({"role": "user", "content": turn.query})
        messages.append({"role": "assistant", "content": turn.answer})
    return messages


def _history_text(history: Sequence[ChatTurn], memory: MemoryConfig) -> str:
    prefix = memory.role_prefix or RolePrefix()
    lines: list[str] = []
    for turn in list(history)[-memory.turns :]:
        lines.append(f"{prefix.user or 'Human'}: {turn.query}")
        lines.append(f"{prefix.assistant or 'Assistant'}: {turn.answer}")
    return "\n".join(lines)


def build_messages(
    messages: Sequence[PromptMessage],
    *,
    completion: bool,
    config: PromptConfig,
    context: ContextConfig,
    memory: MemoryConfig | None,
    variables: VariableReader,
    history: Sequence[ChatTurn],
    in_chat: bool,
) -> list[dict[str, str]]:
    """The messages sent to the model. `in_chat`: the run has a conversation
    (Dify gives an LLM node memory only then)."""
    context_text = ""
    if context.selector:
        context_text = _context_text(variables.get(context.selector))
    jinja_values = {v.variable: variables.get(v.value_selector) for v in config.jinja2_variables}
    rendered: list[dict[str, str]] = []
    for message in messages:
        if message.edition_type == "jinja2":
            content = render_jinja(message.jinja2_text or "", jinja_values)
        else:
            content = render_text(
                message.text.replace(CONTEXT_PLACEHOLDER, context_text), variables
            )
        rendered.append({"role": "user" if completion else message.role, "content": content})
    uses_memory = in_chat and memory is not None and memory.enabled
    if uses_memory:
        assert memory is not None
        query = render_text(memory.query, variables)
        if completion:
            _merge_completion_memory(rendered, _history_text(history, memory), query)
        else:
            rendered.extend(_history_messages(history, memory.turns))
            rendered.append({"role": "user", "content": query})
    kept = [m for m in rendered if m["content"].strip()]
    if not kept:
        raise NodeRunError("dsl.node.emptyPrompt")
    return kept


def _merge_completion_memory(rendered: list[dict[str, str]], histories: str, query: str) -> None:
    """Completion models get one text: the histories go where the template says
    (`{{#histories#}}`), else before it; the query replaces `#sys.query#`."""
    if not rendered:
        rendered.append({"role": "user", "content": ""})
    text = rendered[0]["content"]
    for marker in HISTORIES_PLACEHOLDERS:
        if marker in text:
            text = text.replace(marker, histories)
            break
    else:
        text = f"{histories}\n{text}" if histories else text
    rendered[0]["content"] = text.replace("#sys.query#", query)
