"""Dify's retriever resources: the knowledge an answer used, as `message_end`'s
`metadata.retriever_resources` lists it. An LLM node whose context is a
knowledge-retrieval `result` reports the records it was given (Dify's
`RetrievalSourceMetadata`); a context of any other value reports none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KNOWLEDGE_SOURCE = "knowledge"


def from_context(value: Any) -> tuple[dict[str, Any], ...]:
    """The knowledge records in a context value, in Dify's shape and order."""
    if not isinstance(value, list):
        return ()
    found: list[dict[str, Any]] = []
    for item in value:
        metadata = item.get("metadata") if isinstance(item, Mapping) else None
        if not isinstance(metadata, Mapping) or metadata.get("_source") != KNOWLEDGE_SOURCE:
            continue
        content = str(item.get("content", ""))
        found.append(
            {
                "position": metadata.get("position") or len(found) + 1,
                "dataset_id": metadata.get("dataset_id"),
                "dataset_name": metadata.get("dataset_name"),
                "document_id": metadata.get("document_id"),
                "document_name": metadata.get("document_name"),
                "data_source_type": metadata.get("data_source_type"),
                "segment_id": metadata.get("segment_id"),
                "retriever_from": metadata.get("retriever_from"),
                "score": metadata.get("score"),
                "hit_count": None,
                "word_count": len(content.split()),
                "segment_position": metadata.get("segment_position"),
                "index_node_hash": None,
                "content": content,
                "page": None,
                "doc_metadata": metadata.get("doc_metadata"),
                "title": item.get("title"),
            }
        )
    return tuple(found)
