"""Pydantic models of an easy-mode export's `model_config` (Dify's `chat`,
`agent-chat` and `completion` apps), as Dify's editor writes it.

Unknown keys are ignored, as Dify ignores them; a value of the wrong type is
a located problem (`model_config.<field>`), as for a node's fields. Features
that cannot run here are refused by name (`unsupported`), or ignored where
Dify also runs without them (`ignored`).
"""

from __future__ import annotations

from typing import Any, Literal

from firstgate.common.dsl import DslModel, dsl_error, shown
from firstgate.common.sections import context_sections
from firstgate.connectors.settings import ToolsSettings
from firstgate.nodes.agent.tools import ToolEntry
from firstgate.nodes.model_call import ModelConfig
from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

EASY_MODES = ("chat", "agent-chat", "completion")
INPUT_TYPES = ("text-input", "paragraph", "select", "number", "checkbox", "file", "file-list")


def unsupported(feature: str) -> Exception:
    """A feature that changes what the app answers and cannot run here: refused by name."""
    return dsl_error(
        "dsl.app.unsupportedFeature", "the feature {feature} cannot run here", feature=feature
    )


def _none_is_default(value: Any) -> Any:
    return {} if value is None else value


class Toggle(DslModel):
    """A feature that is only on or off (`{enabled: true}`)."""

    enabled: bool = False


class PromptText(DslModel):
    role: Literal["system", "user", "assistant"] = "user"
    text: str = ""


class ChatPromptConfig(DslModel):
    prompt: list[PromptText] = Field(default_factory=list)


class HistoriesRole(DslModel):
    user_prefix: str = "Human"
    assistant_prefix: str = "Assistant"


class CompletionPrompt(DslModel):
    text: str = ""


class CompletionPromptConfig(DslModel):
    prompt: CompletionPrompt = Field(default_factory=CompletionPrompt)
    conversation_histories_role: HistoriesRole = Field(default_factory=HistoriesRole)


class DatasetRef(DslModel):
    enabled: bool = True
    id: str = Field(min_length=1)


class DatasetEntry(DslModel):
    dataset: DatasetRef


class DatasetList(DslModel):
    datasets: list[DatasetEntry] = Field(default_factory=list)


class DatasetConfigs(DslModel):
    retrieval_model: Literal["single", "multiple"] = "multiple"
    top_k: int = Field(default=4, ge=1, le=100)
    score_threshold: float | None = None
    score_threshold_enabled: bool = False
    reranking_enable: bool = False
    datasets: DatasetList = Field(default_factory=DatasetList)

    @field_validator("datasets", mode="before")
    @classmethod
    def _empty(cls, value: Any) -> Any:
        return _none_is_default(value)

    @property
    def threshold(self) -> float | None:
        return self.score_threshold if self.score_threshold_enabled else None


class AgentTool(DslModel):
    """One `agent_mode.tools` entry; an older export's `{dataset: {...}}` entry is a dataset."""

    enabled: bool = True
    provider_type: str = "builtin"
    provider_id: str = ""
    provider_name: str = ""
    tool_name: str = ""
    tool_label: str = ""
    tool_parameters: dict[str, Any] = Field(default_factory=dict)
    dataset: DatasetRef | None = None
    # A workflow tool the settings do not define: the agent runs without it.
    _absent: bool = PrivateAttr(default=False)

    @field_validator("tool_parameters", mode="before")
    @classmethod
    def _empty(cls, value: Any) -> Any:
        return _none_is_default(value)

    @model_validator(mode="after")
    def _runs_here(self, info: ValidationInfo) -> AgentTool:
        if not self.enabled or self.dataset is not None:
            return self
        if self.provider_type == "workflow":
            # Dify's agent apps leave out a tool they cannot load (a workflow tool
            # lives in Dify's database, not in the export) and answer without it.
            defined = context_sections(info).get(ToolsSettings).workflow_providers
            if self.provider_id not in defined:
                self._absent = True
                return self
        # The tool node's check: a tool that cannot run here is refused by name.
        ToolEntry.model_validate(self.entry(), context=info.context)
        return self

    @property
    def absent(self) -> bool:
        return self._absent

    def entry(self) -> dict[str, Any]:
        """The agent node's tool entry: the export's fixed values, the rest for the model."""
        fixed = {
            name: {"auto": 0, "value": value}
            for name, value in self.tool_parameters.items()
            if value not in (None, "")
        }
        return {
            "provider_name": self.provider_id or self.provider_name,
            "provider_id": self.provider_id,
            "type": self.provider_type,
            "tool_name": self.tool_name,
            "tool_label": self.tool_label,
            "enabled": self.enabled,
            "parameters": fixed,
        }


class AgentMode(DslModel):
    enabled: bool = False
    strategy: Literal["function_call", "react"] = "function_call"
    max_iteration: int = Field(default=5, ge=1, le=99)
    tools: list[AgentTool] = Field(default_factory=list)

    @field_validator("strategy", mode="before")
    @classmethod
    def _older_names(cls, value: Any) -> Any:
        # Older exports: `router` / `react_router` (a dataset router), empty for the default.
        return {"": "function_call", None: "function_call", "router": "function_call"}.get(
            value, "react" if value == "react_router" else value
        )


class KeywordRule(DslModel):
    enabled: bool = False
    preset_response: str = ""


class ModerationConfig(DslModel):
    keywords: str = ""
    inputs_config: KeywordRule = Field(default_factory=KeywordRule)
    outputs_config: KeywordRule = Field(default_factory=KeywordRule)


class SensitiveWordAvoidance(DslModel):
    enabled: bool = False
    type: str = ""
    config: ModerationConfig = Field(default_factory=ModerationConfig)

    @field_validator("config", mode="before")
    @classmethod
    def _empty(cls, value: Any) -> Any:
        return _none_is_default(value)

    @model_validator(mode="after")
    def _runs_here(self) -> SensitiveWordAvoidance:
        # Moderation through an API or OpenAI's model would change what the app answers.
        if self.enabled and self.type != "keywords":
            raise unsupported(f"sensitive_word_avoidance ({self.type or 'no type'})")
        return self

    @property
    def keywords(self) -> list[str]:
        """Dify's keyword list: one per line, empty lines dropped, compared lower-cased."""
        return [k.lower() for k in self.config.keywords.split("\n") if k]


class ImageUpload(DslModel):
    enabled: bool = False
    number_limits: int = 3
    detail: Literal["high", "low"] = "high"
    transfer_methods: list[str] = Field(default_factory=list)


class FileUpload(DslModel):
    enabled: bool = False
    allowed_file_types: list[str] = Field(default_factory=list)
    allowed_file_extensions: list[str] = Field(default_factory=list)
    allowed_file_upload_methods: list[str] = Field(default_factory=list)
    number_limits: int = 3
    image: ImageUpload = Field(default_factory=ImageUpload)

    @property
    def takes_files(self) -> bool:
        return self.enabled or self.image.enabled

    @property
    def images(self) -> bool:
        """Whether images go to the model (vision): `image` on, or image among the types."""
        return self.image.enabled or (self.enabled and "image" in self.allowed_file_types)


class TextToSpeech(DslModel):
    enabled: bool = False


class ModelConfigSection(DslModel):
    model: ModelConfig
    prompt_type: Literal["simple", "advanced"] = "simple"
    pre_prompt: str = ""
    chat_prompt_config: ChatPromptConfig = Field(default_factory=ChatPromptConfig)
    completion_prompt_config: CompletionPromptConfig = Field(default_factory=CompletionPromptConfig)
    user_input_form: list[dict[str, dict[str, Any]]] = Field(default_factory=list)
    dataset_configs: DatasetConfigs = Field(default_factory=DatasetConfigs)
    dataset_query_variable: str = ""
    retriever_resource: Toggle = Field(default_factory=Toggle)
    agent_mode: AgentMode = Field(default_factory=AgentMode)
    opening_statement: str = ""
    suggested_questions: list[str] = Field(default_factory=list)
    suggested_questions_after_answer: Toggle = Field(default_factory=Toggle)
    more_like_this: Toggle = Field(default_factory=Toggle)
    sensitive_word_avoidance: SensitiveWordAvoidance = Field(default_factory=SensitiveWordAvoidance)
    file_upload: FileUpload = Field(default_factory=FileUpload)
    speech_to_text: Toggle = Field(default_factory=Toggle)
    text_to_speech: TextToSpeech = Field(default_factory=TextToSpeech)
    annotation_reply: Toggle = Field(default_factory=Toggle)
    external_data_tools: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator(
        "chat_prompt_config",
        "completion_prompt_config",
        "dataset_configs",
        "retriever_resource",
        "agent_mode",
        "suggested_questions_after_answer",
        "more_like_this",
        "sensitive_word_avoidance",
        "file_upload",
        "speech_to_text",
        "text_to_speech",
        "annotation_reply",
        mode="before",
    )
    @classmethod
    def _null_blocks(cls, value: Any) -> Any:
        # The editor writes `{}` or null for a block it never configured.
        return _none_is_default(value)

    @field_validator("user_input_form", "suggested_questions", "external_data_tools", mode="before")
    @classmethod
    def _null_lists(cls, value: Any) -> Any:
        return [] if value is None else value

    @field_validator("pre_prompt", "opening_statement", "dataset_query_variable", mode="before")
    @classmethod
    def _null_text(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("user_input_form")
    @classmethod
    def _known_inputs(cls, form: list[dict[str, dict[str, Any]]]) -> Any:
        for item in form:
            for kind in item:
                if kind not in INPUT_TYPES:
                    raise dsl_error(
                        "dsl.app.inputType",
                        "the input type {type} cannot run here (supported: {supported})",
                        type=shown(kind),
                        supported=", ".join(INPUT_TYPES),
                    )
        return form

    @field_validator("external_data_tools")
    @classmethod
    def _no_external_data(cls, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # They fill inputs from an API a Dify workspace defines: not in the export.
        if any(t.get("enabled", True) for t in tools):
            raise unsupported("external_data_tools")
        return tools

    @property
    def datasets(self) -> list[str]:
        """The enabled datasets: `dataset_configs`, and older exports' dataset tools."""
        found = [d.dataset.id for d in self.dataset_configs.datasets.datasets if d.dataset.enabled]
        found += [t.dataset.id for t in self.agent_mode.tools if t.dataset and t.dataset.enabled]
        return list(dict.fromkeys(found))

    @property
    def tools(self) -> list[AgentTool]:
        """The agent's tools, as it runs them."""
        return [
            t for t in self.agent_mode.tools if t.dataset is None and t.enabled and not t.absent
        ]

    @property
    def absent_tools(self) -> list[tuple[int, AgentTool]]:
        """The tools it runs without (each with its place in `agent_mode.tools`)."""
        return [(i, t) for i, t in enumerate(self.agent_mode.tools) if t.absent]


def ignored(config: ModelConfigSection) -> list[str]:
    """Features Dify also answers without (the client asks for them separately):
    accepted, not served here; the loader says so once."""
    found = []
    for name in ("speech_to_text", "text_to_speech", "annotation_reply"):
        if getattr(config, name).enabled:
            found.append(name)
    return found
