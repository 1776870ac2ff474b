"""Pydantic models of the Dify DSL document around the nodes: app, graph, edges.

Node `data` is validated per node type (see `nodes.registry`); here nodes stay
raw so that one broken node does not hide problems in the others.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from nodes.base import LEGACY_SUCCESS_HANDLE, SUCCESS_HANDLE
from nodes.config import DslModel

Mode = Literal["workflow", "advanced-chat"]


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
    value_type: str = "string"


class WorkflowSection(DslModel):
    graph: Graph
    environment_variables: list[EnvironmentVariable] = Field(default_factory=list)


class Document(DslModel):
    version: str = ""
    kind: Literal["app"] = "app"
    app: App
    workflow: WorkflowSection
