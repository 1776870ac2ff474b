"""The LLM node's prompt, as Dify builds it: the template's messages (with the
knowledge context and Jinja2 messages), then in a chatflow the conversation's
earlier turns (the node's `memory`: a window of turns; role prefixes for
completion models) and the user's query (`query_prompt_template`, by default
`{{#sys.query#}}`). Messages that render empty are dropped, as Dify drops them.
With `vision` on, image files (`sys.files`, or the files the vision selector
names) go with the last user message as OpenAI-style `image_url` parts; a local
image travels as a data URI.

A prompt has no character cap (Dify puts none on it; the 400,000-character
cap of `common.rendering` is its template-transform limit): it is built
against its route's `max_prompt_bytes` (`PromptBudget`, UTF-8 bytes of the
text, 32 MiB unless the settings say otherwise), charged piece by piece while
it is built, so a prompt past the bound fails after holding about the bound,
not the whole. A Jinja2 message is a template's output and keeps the
template cap.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from firstgate.common.dsl import DslModel, between, note_warning
from firstgate.common.files import DEFAULT_SIZE_LIMITS, File, FileType
from firstgate.common.rendering import TextBudget
from firstgate.locales.localized_error import LocalizedError
from firstgate.nodes.base import ChatTurn, NodeRunError, VariableReader
from firstgate.nodes.config import OptionalSelector, SelectorField
from firstgate.nodes.selectors import Selector, template_selectors
from firstgate.nodes.templates.jinja import checked_template, render_jinja
from firstgate.nodes.values import as_text, render_text
from firstgate.plugin_daemon_client.plan import DEFAULT_MAX_PROMPT_BYTES
from pydantic import Field, ValidationInfo, model_validator

if TYPE_CHECKING:
    from firstgate.common.cancel import Cancellable
    from firstgate.sandbox.executor import CodeExecutor

CONTEXT_PLACEHOLDER = "{{#context#}}"
HISTORIES_PLACEHOLDERS = ("{{#histories#}}", "#histories#")
DEFAULT_QUERY = "{{#sys.query#}}"
# Dify reads at most this many earlier turns when the window is off.
UNWINDOWED_TURNS = 500


class PromptTooLargeError(LocalizedError):
    """An LLM prompt would pass its route's `max_prompt_bytes`."""

    message_key = "errors.llm.promptTooLarge"


class PromptBudget(TextBudget):
    """The bytes of one prompt (all its messages) against its route's bound."""

    __slots__ = ("route",)

    def __init__(self, limit: int, route: str) -> None:
        super().__init__(limit)
        self.route = route

    def charge_text(self, piece: str) -> None:
        self.charge(len(piece) if piece.isascii() else _utf8_len(piece))

    def charge(self, characters: int) -> None:
        # Here the unit is bytes: `charge_text` counts them.
        self.size += characters
        if self.size > self.limit:
            raise PromptTooLargeError(limit=self.limit, route=self.route, size=self.size)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


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

    @model_validator(mode="after")
    def _whitespace_only(self, info: ValidationInfo) -> PromptMessage:
        written = (self.jinja2_text or "") if self.edition_type == "jinja2" else self.text
        if written and not written.strip():  # Dify sends it, as do we
            note_warning(info.context, "dsl.warning.whitespaceMessage", role=self.role)
        return self


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


class VisionSettings(DslModel):
    detail: Literal["high", "low"] = "high"
    variable_selector: OptionalSelector = None  # the editor writes [] for "sys.files"


class VisionConfig(DslModel):
    enabled: bool = False
    configs: VisionSettings = Field(default_factory=VisionSettings)

    @property
    def files_selector(self) -> Selector:
        return self.configs.variable_selector or ("sys", "files")


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
    vision: VisionConfig | None = None,
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
    if vision is not None and vision.enabled and vision.configs.variable_selector:
        found.append(vision.configs.variable_selector)
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


def history_messages(history: Sequence[ChatTurn], memory: MemoryConfig) -> list[dict[str, str]]:
    """The memory window as user/assistant messages (chat prompts)."""
    return _history_messages(history, memory.turns)


def history_text(history: Sequence[ChatTurn], memory: MemoryConfig) -> str:
    """The memory window as `Human: ...` / `Assistant: ...` lines (completion prompts)."""
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
    vision: VisionConfig | None = None,
    executor: CodeExecutor | None = None,
    cancel: Cancellable | None = None,
    budget: TextBudget | None = None,
) -> list[dict[str, Any]]:
    """The messages sent to the model. `in_chat`: the run has a conversation
    (Dify gives an LLM node memory only then). Jinja2 messages that need it
    render in the code sandbox (`executor`). `budget`: the route's
    `PromptBudget` (default: the default bound, no route named)."""
    context_text = ""
    if context.selector:
        context_text = _context_text(variables.get(context.selector))
    jinja_values = {v.variable: variables.get(v.value_selector) for v in config.jinja2_variables}
    # One bound for the whole prompt, checked while it is built. The context
    # goes in as text: a retrieved document that contains `{{#env.SECRET#}}` is
    # not a template and pulls no variables in.
    if budget is None:
        budget = PromptBudget(DEFAULT_MAX_PROMPT_BYTES, "")
    rendered: list[dict[str, str]] = []
    for message in messages:
        if message.edition_type == "jinja2":
            content = render_jinja(
                message.jinja2_text or "", jinja_values, executor=executor, cancel=cancel
            )
            budget.charge_text(content)
        else:
            pieces: list[str] = []
            for index, part in enumerate(message.text.split(CONTEXT_PLACEHOLDER)):
                if index:
                    budget.charge_text(context_text)
                    pieces.append(context_text)
                pieces.append(render_text(part, variables, budget))
            content = "".join(pieces)
        rendered.append({"role": "user" if completion else message.role, "content": content})
    uses_memory = in_chat and memory is not None and memory.enabled
    if uses_memory:
        assert memory is not None
        query = render_text(memory.query, variables, budget)
        if completion:
            histories = history_text(history, memory)
            budget.charge_text(histories)
            _merge_completion_memory(rendered, histories, query)
        else:
            earlier = _history_messages(history, memory.turns)
            for turn in earlier:
                budget.charge_text(turn["content"])
            rendered.extend(earlier)
            rendered.append({"role": "user", "content": query})
    # Dify drops empty messages; one of whitespace only is sent as it is.
    kept: list[dict[str, Any]] = [m for m in rendered if m["content"]]
    if vision is not None and vision.enabled:
        _attach_images(kept, _images(variables.get(vision.files_selector)), vision.configs.detail)
    if not kept:
        raise NodeRunError("dsl.node.emptyPrompt")
    return kept


def attach_vision(
    messages: list[dict[str, Any]], vision: VisionConfig, variables: VariableReader
) -> None:
    """With vision on, the image files its selector names (`sys.files` by
    default) go with the last user message (the classifier and the extractor
    use this as the LLM node does)."""
    if vision.enabled:
        _attach_images(
            messages, _images(variables.get(vision.files_selector)), vision.configs.detail
        )


def vision_selectors(vision: VisionConfig) -> list[Selector]:
    selector = vision.configs.variable_selector
    return [selector] if vision.enabled and selector else []


def _images(value: Any) -> list[File]:
    found = value if isinstance(value, list) else [value]
    return [f for f in found if isinstance(f, File) and f.type is FileType.IMAGE]


def image_url(file: File) -> str:
    """Where the model gets the image: its URL, or its bytes as a data URI."""
    if file.remote_url:
        return file.remote_url
    data = file.read_bytes(DEFAULT_SIZE_LIMITS[FileType.IMAGE])
    return f"data:{file.mime_type};base64,{base64.b64encode(data).decode('ascii')}"


def _attach_images(messages: list[dict[str, Any]], images: list[File], detail: str) -> None:
    """Dify puts the files with the last user message (a new one if there is none)."""
    if not images:
        return
    users = [m for m in messages if m["role"] == "user"]
    if users:
        target = users[-1]
    else:
        target = {"role": "user", "content": ""}
        messages.append(target)
    parts: list[dict[str, Any]] = [{"type": "text", "text": target["content"]}]
    parts.extend(
        {"type": "image_url", "image_url": {"url": image_url(f), "detail": detail}} for f in images
    )
    target["content"] = parts


def shown_prompt(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as events show them: an image's data URI as its length only."""
    shown: list[dict[str, Any]] = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [_short_part(part) for part in content]
        shown.append({**message, "content": content})
    return shown


def _short_part(part: dict[str, Any]) -> dict[str, Any]:
    url = part.get("image_url", {}).get("url", "")
    if isinstance(url, str) and url.startswith("data:"):
        head = url.split(",", 1)[0]
        return {**part, "image_url": {**part["image_url"], "url": f"{head},<{len(url)} chars>"}}
    return part


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
