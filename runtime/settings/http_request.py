"""The `http_request` section: which private addresses a workflow's HTTP
requests may reach, how many redirects they follow, how big a response may be.

    http_request:
      allow: ["127.0.0.1:8080", "10.0.0.0/8", "intranet.example"]
      max_redirects: 20
      max_text_bytes: 1048576       # Dify's default, 1 MiB
      max_binary_bytes: 10485760    # Dify's default, 10 MiB

Only URLs that come from a workflow file or its inputs are under this policy;
endpoints the operator configures (model routes, plugin daemon, knowledge
APIs, MCP servers) are trusted settings.
"""

from __future__ import annotations

from typing import Annotated, Any

from firstgate.common.dsl import DslModel, dsl_error, shown
from firstgate.connectors.guarded_http import (
    DEFAULT_MAX_BINARY_BYTES,
    DEFAULT_MAX_REDIRECTS,
    DEFAULT_MAX_TEXT_BYTES,
)
from firstgate.connectors.net_policy import AllowEntryError, parse_allow
from pydantic import BeforeValidator, Field


def _allow_entry(value: Any) -> str:
    try:
        if not isinstance(value, str):
            raise AllowEntryError(shown(value))
        parse_allow(value)
    except AllowEntryError as exc:
        raise dsl_error(
            "dsl.settings.allowEntry",
            "must be a host, host:port, address or CIDR block, got {got}",
            got=str(exc)[:120],
        ) from None
    return value


class HttpRequestSettings(DslModel):
    allow: list[Annotated[str, BeforeValidator(_allow_entry)]] = Field(default_factory=list)
    max_redirects: int = Field(default=DEFAULT_MAX_REDIRECTS, ge=0, le=100)
    max_text_bytes: int = Field(default=DEFAULT_MAX_TEXT_BYTES, ge=1)
    max_binary_bytes: int = Field(default=DEFAULT_MAX_BINARY_BYTES, ge=1)
