"""Dify's published External Knowledge API.

`POST <endpoint>/retrieval` with `Authorization: Bearer <key>` and
`{"knowledge_id", "query", "retrieval_setting": {"top_k", "score_threshold"},
"metadata_condition"?}`; the answer is `{"records": [{"content", "score",
"title", "metadata"}]}`. The endpoint is the operator's (a trusted setting),
so it is not under the workflow's address policy.

Where Dify returns an empty list on a non-200 answer, this client raises a
`KnowledgeError` naming the status and the service's `error_code`/`error_msg`:
a knowledge service that is down must not look like "nothing found" (the
node's error strategy can still turn it into an empty result).
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
from firstgate.connectors.knowledge import KnowledgeError, MetadataCondition, Record

_MAX_ANSWER_BYTES = 16 * 1024 * 1024


# A retrieval's time bound unless the dataset's settings give another.
DEFAULT_TIMEOUT_S = 30.0


class ExternalKnowledge:
    def __init__(
        self,
        endpoint: str,
        knowledge_id: str,
        api_key: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.url = endpoint.rstrip("/") + "/retrieval"
        self.knowledge_id = knowledge_id
        self._api_key = api_key
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s), trust_env=False)

    def close(self) -> None:
        self._http.close()

    def _fail(self, detail: str) -> KnowledgeError:
        if self._api_key:
            detail = detail.replace(self._api_key, "******")
        return KnowledgeError("errors.knowledge.external", url=self.url, detail=detail[:300])

    def search(
        self,
        query: str,
        *,
        top_k: int,
        score_threshold: float | None = None,
        condition: MetadataCondition | None = None,
    ) -> list[Record]:
        body: dict[str, Any] = {
            "knowledge_id": self.knowledge_id,
            "query": query,
            "retrieval_setting": {"top_k": top_k, "score_threshold": score_threshold or 0.0},
        }
        if condition is not None and condition.conditions:
            body["metadata_condition"] = condition.as_dict()
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            with self._http.stream("POST", self.url, json=body, headers=headers) as response:
                raw = bytearray()
                for chunk in response.iter_bytes():
                    raw += chunk
                    if len(raw) > _MAX_ANSWER_BYTES:
                        raise self._fail(f"the answer is larger than {_MAX_ANSWER_BYTES} bytes")
                status = response.status_code
        except httpx.HTTPError as exc:
            raise self._fail(f"{type(exc).__name__}: {exc}") from None
        try:
            doc = json.loads(bytes(raw))
        except (ValueError, RecursionError):
            doc = None
        if status != 200:
            detail = f"HTTP {status}"
            if isinstance(doc, dict) and ("error_code" in doc or "error_msg" in doc):
                detail += f" (error_code {doc.get('error_code')}: {doc.get('error_msg')})"
            raise self._fail(detail)
        if not isinstance(doc, dict) or not isinstance(doc.get("records", []), list):
            raise self._fail('the answer is not {"records": [...]}')
        return [self._record(item) for item in doc.get("records", [])]

    def _record(self, item: Any) -> Record:
        if not isinstance(item, dict) or not isinstance(item.get("content"), str):
            raise self._fail("a record has no text content")
        score = item.get("score")
        if (
            isinstance(score, bool)
            or not isinstance(score, int | float)
            or not math.isfinite(score)
        ):
            score = 0.0
        metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
        title = item.get("title") if isinstance(item.get("title"), str) else ""
        return Record(
            content=item["content"],
            score=float(score),
            title=title,
            document_id=str(metadata.get("document_id") or title),
            metadata=metadata,
        )
