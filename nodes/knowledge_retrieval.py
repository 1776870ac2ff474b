"""Knowledge-retrieval node: Dify's fields, its `result` shape, backends from the
runtime settings (`knowledge.datasets`).

- `multiple` mode: every dataset is searched with the node's `top_k` and
  `score_threshold`; the hits are merged by score and cut to `top_k`.
  A rerank model is not called (there is no rerank route): the merge is by
  each backend's own score, and `process_data.reranking` says so.
- `single` mode: Dify lets an LLM pick one dataset. Here the pick is
  deterministic: each dataset is searched with its own settings (`top_k`,
  `score_threshold` in `knowledge.datasets`) and the dataset with the best hit
  answers.
- Metadata filtering: `manual` conditions go to the backend (the External
  Knowledge API gets `metadata_condition`; the local index filters on each
  document's metadata). `automatic` (an LLM writes the conditions) is refused
  at load time by name.

`result` items: `{content, title, metadata: {_source, position, dataset_id,
dataset_name, document_id, document_name, data_source_type, retriever_from,
score, doc_metadata}}`, highest score first, ready for an LLM node's context.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from firstgate.common.dsl import DslModel, dsl_error
from firstgate.connectors.knowledge import Condition, MetadataCondition, Record
from firstgate.nodes.base import NodeContext, NodeResult, NodeRunError, VariableReader
from firstgate.nodes.config import BaseNodeData, SelectorField
from firstgate.nodes.selectors import Selector, template_selectors
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.values import render_text
from pydantic import Field, field_validator


class MultipleRetrievalConfig(DslModel):
    top_k: int = Field(default=4, ge=1, le=100)
    score_threshold: float | None = None
    reranking_mode: str = "reranking_model"
    reranking_enable: bool = False


class FilterCondition(DslModel):
    name: str
    comparison_operator: str
    value: Any = None


class FilterConditions(DslModel):
    logical_operator: Literal["and", "or"] | None = "and"
    conditions: list[FilterCondition] | None = None


class Data(BaseNodeData):
    query_variable_selector: SelectorField | None = None
    dataset_ids: list[str] = Field(default_factory=list)
    retrieval_mode: Literal["single", "multiple"] = "multiple"
    multiple_retrieval_config: MultipleRetrievalConfig | None = None
    metadata_filtering_mode: Literal["disabled", "automatic", "manual"] | None = "disabled"
    metadata_filtering_conditions: FilterConditions | None = None

    @field_validator("query_variable_selector", mode="before")
    @classmethod
    def _empty_selector(cls, value: Any) -> Any:
        return None if value in ([], None, "") else value

    @field_validator("metadata_filtering_mode")
    @classmethod
    def _no_automatic(cls, value: str | None) -> str | None:
        if value == "automatic":
            raise dsl_error(
                "dsl.knowledge.automaticFilter",
                "automatic metadata filtering (an LLM writes the conditions) is not supported "
                "yet; use manual conditions",
            )
        return value


def selectors(data: Data) -> list[Selector]:
    found = [data.query_variable_selector] if data.query_variable_selector else []
    conditions = data.metadata_filtering_conditions
    if data.metadata_filtering_mode == "manual" and conditions and conditions.conditions:
        for c in conditions.conditions:
            if isinstance(c.value, str):
                found.extend(template_selectors(c.value))
    return found


def output_names(data: Data) -> set[str]:
    return {"result"}


def _condition(data: Data, variables: VariableReader) -> MetadataCondition | None:
    conditions = data.metadata_filtering_conditions
    if data.metadata_filtering_mode != "manual" or not conditions or not conditions.conditions:
        return None
    resolved = []
    for c in conditions.conditions:
        value = c.value
        if isinstance(value, str) and c.comparison_operator not in ("empty", "not empty"):
            value = " ".join(render_text(value, variables).split())
        resolved.append(Condition(c.name, c.comparison_operator, value))
    return MetadataCondition(conditions.logical_operator or "and", tuple(resolved))


def _segment_id(dataset_id: str, document_id: str, content: str) -> str:
    """A segment's id, stable across runs (Dify's segments always have one; the
    typed client SDK requires it): from where the text is and what it says."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{dataset_id}/{document_id}\n{content}"))


def _item(record: Record, dataset_id: str, dataset_name: str, kind: str) -> dict[str, Any]:
    document_id = record.document_id or record.title
    return {
        "metadata": {
            "_source": "knowledge",
            "dataset_id": dataset_id,
            "dataset_name": dataset_name,
            "document_id": document_id,
            "document_name": record.title,
            "segment_id": _segment_id(dataset_id, document_id, record.content),
            "data_source_type": kind,
            "retriever_from": "workflow",
            "score": record.score,
            "doc_metadata": dict(record.metadata),
        },
        "title": record.title,
        "content": record.content,
    }


def _search(ctx: NodeContext, dataset_id: str, query: str, **kw: Any) -> list[dict[str, Any]]:
    assert ctx.connectors is not None
    spec, backend = ctx.connectors.dataset(dataset_id)
    records = backend.search(query, **kw)
    name = spec.name or dataset_id
    return [_item(r, dataset_id, name, spec.kind) for r in records]


def _score(item: dict[str, Any]) -> float:
    return float(item["metadata"]["score"] or 0.0)


def run(data: Data, ctx: NodeContext) -> NodeResult:
    if data.query_variable_selector is None:
        return NodeResult(outputs={"result": []})
    if ctx.connectors is None:
        raise NodeRunError("errors.connector.missing")
    query = ctx.variables.get(data.query_variable_selector)
    if not isinstance(query, str):
        raise NodeRunError("errors.knowledge.queryNotText")
    condition = _condition(data, ctx.variables)
    process: dict[str, Any] = {"retrieval_mode": data.retrieval_mode}
    results: list[dict[str, Any]] = []
    if query.strip() and data.dataset_ids:
        if data.retrieval_mode == "multiple":
            config = data.multiple_retrieval_config or MultipleRetrievalConfig()
            for dataset_id in data.dataset_ids:
                results += _search(
                    ctx,
                    dataset_id,
                    query,
                    top_k=config.top_k,
                    score_threshold=config.score_threshold,
                    condition=condition,
                )
            results = sorted(results, key=_score, reverse=True)[: config.top_k]
            if config.reranking_enable:
                process["reranking"] = "not applied: merged by each backend's score"
        else:
            best: list[dict[str, Any]] = []
            for dataset_id in data.dataset_ids:
                spec, _ = ctx.connectors.dataset(dataset_id)
                found = _search(
                    ctx,
                    dataset_id,
                    query,
                    top_k=spec.top_k,
                    score_threshold=spec.score_threshold,
                    condition=condition,
                )
                if found and (not best or _score(found[0]) > _score(best[0])):
                    best = found
                    process["chosen_dataset"] = dataset_id
            results = sorted(best, key=_score, reverse=True)
    for position, item in enumerate(results, start=1):
        item["metadata"]["position"] = position
    return NodeResult(outputs={"result": results}, process_data=process)


SPEC = NodeSpec(
    type="knowledge-retrieval",
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=True,
)
