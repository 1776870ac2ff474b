"""The `knowledge` section: where each dataset id of a knowledge-retrieval node lives.

    knowledge:
      datasets:
        6f1c...: {kind: external, endpoint: https://kb.example/api, api_key_env: KB_KEY,
                  knowledge_id: support-articles, name: Support}
        a2b3...: {kind: local, index: ./kb/handbook.sqlite, name: Handbook}

`external` is Dify's External Knowledge API (`POST <endpoint>/retrieval`, a
bearer key from `api_key_env`); `local` is an SQLite FTS5 index built with
`firstgate index DIR --dataset ID --index PATH`. `top_k` and
`score_threshold` are the dataset's own retrieval settings, used by single
retrieval mode (multiple mode takes the node's).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from firstgate.common.dsl import DslModel, dsl_error, shown
from pydantic import BeforeValidator, Field


def http_url(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise dsl_error(
            "dsl.models.baseUrlScheme",
            "base_url must start with http:// or https://, got {value}",
            value=shown(value)[:80],
        )
    return value.rstrip("/")


HttpUrl = Annotated[str, BeforeValidator(http_url)]


class _Dataset(DslModel):
    name: str | None = None
    description: str = ""
    top_k: int = Field(default=4, ge=1, le=100)
    score_threshold: float | None = Field(default=None, ge=0, le=1)


class ExternalDataset(_Dataset):
    kind: Literal["external"]
    endpoint: HttpUrl
    knowledge_id: str = Field(min_length=1)
    api_key_env: str | None = None
    timeout_s: float = Field(default=30.0, gt=0, le=600)


class LocalDataset(_Dataset):
    kind: Literal["local"]
    index: str = Field(min_length=1)


class KnowledgeSettings(DslModel):
    datasets: dict[str, Annotated[ExternalDataset | LocalDataset, Field(discriminator="kind")]] = (
        Field(default_factory=dict)
    )
