"""The JSON bodies the Service API takes, as Dify's controllers declare them.

A body that does not fit is Dify's 400 `invalid_param`, naming the field and
what was wrong with it (never a traceback)."""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal, TypeVar

from firstgate.common.files import MB
from firstgate.common.storable_text import is_storable
from firstgate.common.storable_text import shown as shown_text
from firstgate.serve.errors import ApiError, invalid_param
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Request

ResponseMode = Literal["blocking", "streaming"]


class _Body(BaseModel):
    # Fields Dify's clients send that firstgate has no use for are accepted and ignored.
    model_config = ConfigDict(extra="ignore")


def _user(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        raise ValueError("must not be empty")
    return value


class WorkflowRunBody(_Body):
    inputs: dict[str, Any]
    response_mode: ResponseMode | None = None
    user: str
    files: list[dict[str, Any]] | None = None

    _user_check = field_validator("user", mode="before")(_user)


class ChatBody(_Body):
    inputs: dict[str, Any]
    query: str
    response_mode: ResponseMode | None = None
    user: str
    conversation_id: str | None = None
    files: list[dict[str, Any]] | None = None
    auto_generate_name: bool = True

    _user_check = field_validator("user", mode="before")(_user)

    @field_validator("conversation_id", mode="before")
    @classmethod
    def _conversation(cls, value: Any) -> Any:
        # Dify: missing or blank is a new conversation; anything else must be a UUID.
        if isinstance(value, str):
            value = value.strip()
            if not value:
                return None
            try:
                return str(uuid.UUID(value))
            except ValueError:
                raise ValueError("must be a UUID") from None
        return value


class UserBody(_Body):
    user: str

    _user_check = field_validator("user", mode="before")(_user)


class ListQuery(_Body):
    user: str
    limit: int = Field(default=20, ge=1, le=100)

    _user_check = field_validator("user", mode="before")(_user)


class ConversationsQuery(ListQuery):
    last_id: str | None = None
    sort_by: Literal["created_at", "-created_at", "updated_at", "-updated_at"] = "-updated_at"


class MessagesQuery(ListQuery):
    conversation_id: str
    first_id: str | None = None


M = TypeVar("M", bound=BaseModel)
MAX_JSON_BYTES = 4 * MB


def request_body(request: Request) -> bytes:
    """The JSON body; past MAX_JSON_BYTES, sent with a length or chunked, is 413."""
    raw = request.get_data()
    if len(raw) > MAX_JSON_BYTES:
        raise RequestEntityTooLarge()
    return raw


def parse_json(raw: bytes) -> dict[str, Any]:
    """A JSON object from a request body, or Dify's 400."""
    if not raw.strip():
        raise invalid_param("serve.error.emptyBody")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise invalid_param("serve.error.badJson") from None
    if not isinstance(value, dict):
        raise invalid_param("serve.error.notAnObject")
    where = unstorable_at(value)
    if where is not None:  # named with the character itself shown as U+FFFD
        raise invalid_param("serve.error.badText", field=shown_text(where))
    return value


def unstorable_at(value: Any) -> str | None:
    """Where (`inputs.topic`, `files.0.url`) a text or key of a JSON value holds
    a character the store cannot keep, or None."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:  # iterative: a body may nest as deep as the JSON decoder allows
        where, item = stack.pop()
        if isinstance(item, str):
            if not is_storable(item):
                return where or "body"
        elif isinstance(item, dict):
            for key, child in item.items():
                path = f"{where}.{key}" if where else str(key)
                if not is_storable(key):
                    return path
                stack.append((path, child))
        elif isinstance(item, list):
            stack.extend((f"{where}.{i}", child) for i, child in enumerate(item))
    return None


def validate(model: type[M], data: dict[str, Any]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc) from None


def _invalid(exc: ValidationError) -> ApiError:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    if first["type"] == "missing":
        return invalid_param("serve.error.missingField", field=where)
    return invalid_param("serve.error.badField", field=where, reason=first["msg"])
