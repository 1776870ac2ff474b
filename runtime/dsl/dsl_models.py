"""Pydantic models of the Dify DSL document around the nodes: app, graph, edges.

Node `data` is validated per node type (see `nodes.registry`); here nodes stay
raw so that one broken node does not hide problems in the others.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from firstgate.common.dsl import DslModel, dsl_error, shown
from firstgate.nodes.base import LEGACY_SUCCESS_HANDLE, SUCCESS_HANDLE
from pydantic import BeforeValidator, Field, model_validator

# The graph modes; an easy mode (chat, agent-chat, completion) is compiled into
# one of them before this model sees it (`runtime/dsl/app_modes/`), but it is named
# here too, so that a mode Dify does not have is told every mode Dify has.
Mode = Literal["workflow", "advanced-chat", "chat", "agent-chat", "completion"]


def _handle(value: Any) -> str:
    if value in (None, "", LEGACY_SUCCESS_HANDLE):
        return SUCCESS_HANDLE
    return str(value)


def _text_id(value: Any) -> Any:
    # Editors write numeric-looking ids; YAML may load them as ints.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


TextId = Annotated[str, BeforeValidator(_text_id)]


class App(DslModel):
    name: str = ""
    mode: Mode


class Edge(DslModel):
    id: TextId = ""
    source: TextId
    target: TextId
    sourceHandle: Annotated[str, BeforeValidator(_handle)] = SUCCESS_HANDLE


class RawNode(DslModel):
    id: TextId = Field(min_length=1)  # an empty id cannot be the end of an edge or a selector
    type: str = "custom"
    data: dict[str, Any] = Field(default_factory=dict)


class Graph(DslModel):
    nodes: list[dict[str, Any]] = Field(default_factory=list)
    edges: list[dict[str, Any]] = Field(default_factory=list)


class EnvironmentVariable(DslModel):
    name: str = Field(min_length=1)
    value: Any = None
    value_type: Literal["string", "number", "secret"] = "string"

    @model_validator(mode="after")
    def _number(self) -> EnvironmentVariable:
        if self.value_type == "number" and self.value not in (None, ""):
            if _as_number(self.value) is None:
                raise dsl_error(
                    "dsl.env.number", "must be a number, got {got}", got=shown(self.value)
                )
        return self


ConversationType = Literal[
    "string",
    "number",
    "integer",
    "boolean",
    "object",
    "array[string]",
    "array[number]",
    "array[object]",
    "array[boolean]",
    "array[any]",
]


def _as_number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value if math.isfinite(value) else None
    try:
        number = float(str(value).strip())
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    return int(number) if number.is_integer() and "." not in str(value) else number


def _json(value: Any) -> Any:
    # The editor stores object and array defaults as JSON text.
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def conversation_default(value_type: str, value: Any) -> Any:
    """A conversation variable's declared default, in its type; raises a DSL error."""
    if value_type == "string":
        return "" if value is None else str(value) if not isinstance(value, dict | list) else None
    if value_type in ("number", "integer"):
        number = 0 if value in (None, "") else _as_number(value)
        if number is not None and (value_type == "number" or isinstance(number, int)):
            return number
        return None
    if value_type == "boolean":
        if value in (None, ""):
            return False
        if isinstance(value, bool):
            return value
        lowered = str(value).strip().lower()
        return {"true": True, "false": False}.get(lowered)
    decoded = _json(value)
    if value_type == "object":
        return {} if decoded in (None, "") else decoded if isinstance(decoded, dict) else None
    if decoded in (None, ""):
        return []
    if not isinstance(decoded, list):
        return None
    item_type = value_type[len("array[") : -1]
    if item_type == "any" or all(conversation_default(item_type, item) == item for item in decoded):
        return decoded
    return None


class ConversationVariable(DslModel):
    name: str = Field(min_length=1)
    value_type: ConversationType = "string"
    value: Any = None
    description: str = ""

    @model_validator(mode="after")
    def _typed_default(self) -> ConversationVariable:
        if conversation_default(self.value_type, self.value) is None:
            raise dsl_error(
                "dsl.conversation.default",
                "the default {got} is not a {type}",
                got=shown(self.value),
                type=self.value_type,
            )
        return self

    @property
    def default(self) -> Any:
        return conversation_default(self.value_type, self.value)


class ImageUpload(DslModel):
    enabled: bool = False
    number_limits: int = 3
    transfer_methods: list[str] = Field(default_factory=list)


class FileUpload(DslModel):
    """`features.file_upload`: whether the app takes files (`sys.files`), which, how many."""

    enabled: bool = False
    allowed_file_types: list[str] = Field(default_factory=list)
    allowed_file_extensions: list[str] = Field(default_factory=list)
    allowed_file_upload_methods: list[str] = Field(default_factory=list)
    number_limits: int = 3
    fileUploadConfig: dict[str, Any] = Field(default_factory=dict)
    image: ImageUpload = Field(default_factory=ImageUpload)


class Toggle(DslModel):
    enabled: bool = False


class Features(DslModel):
    file_upload: FileUpload = Field(default_factory=FileUpload)
    retriever_resource: Toggle = Field(default_factory=Toggle)


class WorkflowSection(DslModel):
    graph: Graph
    environment_variables: list[EnvironmentVariable] = Field(default_factory=list)
    conversation_variables: list[ConversationVariable] = Field(default_factory=list)
    features: Features = Field(default_factory=Features)


def _version(value: Any) -> Any:
    return "" if value is None else str(value) if isinstance(value, int | float) else value


def _nullable_list(value: Any) -> Any:
    return [] if value is None else value


class Document(DslModel):
    version: Annotated[str, BeforeValidator(_version)] = ""  # exports before 0.1.0 have none
    kind: Literal["app"] = "app"
    app: App
    workflow: WorkflowSection
    # Marketplace plugins the app uses; model routes come from the settings file.
    dependencies: Annotated[list[Any], BeforeValidator(_nullable_list)] = Field(
        default_factory=list
    )
