"""Dify's error replies: `{"code", "message", "status"}` with Dify's codes and
HTTP statuses, so a Dify client's error handling works unchanged. The message
is firstgate's own, translated (`Accept-Language`, else en-US)."""

from __future__ import annotations

import json
from typing import Any

from firstgate.locales import t


class ApiError(Exception):
    """An error reply: Dify's `code` and HTTP `status`, a message key and its params."""

    def __init__(self, status: int, code: str, message_key: str, **params: Any) -> None:
        self.status = status
        self.code = code
        self.message_key = message_key
        self.params = params
        super().__init__(t(message_key, None, **params))

    def body(self, locale: str | None = None) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": t(self.message_key, locale, **self.params),
            "status": self.status,
        }

    def to_dict(self) -> dict[str, Any]:
        """As plain values, to travel to another process (`from_dict` reads it)."""
        return {
            "status": self.status,
            "code": self.code,
            "message_key": self.message_key,
            "params": {k: str(v) for k, v in self.params.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ApiError:
        return cls(
            int(data["status"]), str(data["code"]), str(data["message_key"]), **data["params"]
        )

    def encoded(self, locale: str | None = None) -> bytes:
        return dump_json(self.body(locale))


def dump_json(value: Any) -> bytes:
    """JSON text as UTF-8 for a reply or an event stream. A lone surrogate that a
    run made (a template, a code node) goes as its `\\u` escape, which JSON
    allows and UTF-8 could not carry raw."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(value, default=str).encode()


# The errors Dify's Service API answers with (code, status), by what went wrong.
def unauthorized(message_key: str) -> ApiError:
    return ApiError(401, "unauthorized", message_key)


def invalid_param(message_key: str, **params: Any) -> ApiError:
    return ApiError(400, "invalid_param", message_key, **params)


def bad_request(message_key: str, **params: Any) -> ApiError:
    return ApiError(400, "bad_request", message_key, **params)


def not_found(message_key: str, **params: Any) -> ApiError:
    return ApiError(404, "not_found", message_key, **params)


def not_chat_app() -> ApiError:
    return ApiError(400, "not_chat_app", "serve.error.notChatApp")


def not_workflow_app() -> ApiError:
    return ApiError(400, "not_workflow_app", "serve.error.notWorkflowApp")
