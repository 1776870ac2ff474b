"""The Service API over what the store keeps: workflow logs, conversation names
and variables, message feedback, suggested questions, the site, end users,
file previews; and Dify's errors for what no route here serves (audio).

Shapes, statuses and codes follow Dify's `api/controllers/service_api/app/`.
`RecordsApi` is a part of `ServiceApi` (its handlers are found by endpoint name).
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from firstgate.nodes.base import RoutePlanner
from firstgate.serve import bodies
from firstgate.serve.app_model import SUGGEST_TURNS, generate_name, suggest_questions
from firstgate.serve.apps import App
from firstgate.serve.errors import (
    ApiError,
    bad_request,
    dump_json,
    invalid_param,
    not_chat_app,
    not_found,
)
from firstgate.serve.file_links import preview_headers
from firstgate.store.base import (
    TRIGGERED_APP_RUN,
    ConversationRecord,
    FeedbackRecord,
    RunRecord,
    Store,
    VariableValue,
)
from pydantic import Field, field_validator, model_validator
from werkzeug.wrappers import Request, Response

# Where firstgate's derived ids live (end users, log entries, conversation variables):
# stable across restarts, distinct per app.
_IDS = uuid.UUID("6f0b8c7e-3a51-4c1e-9a57-1d2f0e6b9c41")


def end_user_id(app_id: str, user: str) -> str:
    """Dify's end-user id for an API user (`user` is its session id)."""
    return str(uuid.uuid5(_IDS, f"end-user:{app_id}:{user}"))


def variable_id(app_id: str, name: str) -> str:
    """A conversation variable's id: one per declared variable of the app."""
    return str(uuid.uuid5(_IDS, f"variable:{app_id}:{name}"))


def _log_id(run_id: str) -> str:
    return str(uuid.uuid5(_IDS, f"log:{run_id}"))


def _iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None).isoformat(timespec="seconds")


def _instant(text: str, field: str) -> float:
    """An ISO 8601 time (a naive one is UTC, as Dify stores times) as epoch seconds."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise invalid_param("serve.error.badTime", field=field) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class LogsQuery(bodies._Body):
    keyword: str | None = None
    status: Literal["succeeded", "failed", "stopped"] | None = None
    created_at__before: str | None = None
    created_at__after: str | None = None
    page: int = Field(default=1, ge=1, le=99999)
    limit: int = Field(default=20, ge=1, le=100)


class RenameBody(bodies.UserBody):
    name: str | None = None
    auto_generate: bool = False

    @model_validator(mode="after")
    def _named(self) -> RenameBody:
        if not self.auto_generate and (self.name is None or not self.name.strip()):
            raise ValueError("name is required when auto_generate is false")
        return self


class VariablesQuery(bodies.ListQuery):
    last_id: str | None = None
    variable_name: str | None = Field(default=None, min_length=1, max_length=255)


class VariableBody(bodies.UserBody):
    value: Any = None

    @model_validator(mode="before")
    @classmethod
    def _has_value(cls, data: Any) -> Any:
        if isinstance(data, dict) and "value" not in data:
            raise ValueError("value is required")
        return data


class FeedbackBody(bodies.UserBody):
    rating: Literal["like", "dislike"] | None = None
    content: str | None = None


class FeedbacksQuery(bodies._Body):
    page: int = Field(default=1, ge=1)
    limit: int = Field(default=20, ge=1, le=101)


class PreviewQuery(bodies._Body):
    as_attachment: bool = False
    user: str | None = None

    @field_validator("as_attachment", mode="before")
    @classmethod
    def _flag(cls, value: Any) -> Any:
        return value.lower() in ("1", "true", "yes", "on") if isinstance(value, str) else value


# What a conversation variable of each declared type holds (Dify's type check).
def _fits(value_type: str, value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if value_type in ("string", "secret"):
        return isinstance(value, str)
    if value_type == "number":
        return number
    if value_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if value_type == "boolean":
        return isinstance(value, bool)
    if value_type == "object":
        return isinstance(value, dict)
    if value_type.startswith("array["):
        if not isinstance(value, list):
            return False
        item = value_type[len("array[") : -1]
        return item == "any" or all(_fits(item, v) for v in value)
    return True


def _type_name(value: Any) -> str:
    return type(value).__name__


def _run_log(record: RunRecord) -> dict[str, Any]:
    return {
        "id": _log_id(record.id),
        "workflow_run": {
            "id": record.id,
            "version": record.workflow_id,
            "status": record.status,
            "error": record.error,
            "elapsed_time": record.elapsed_time,
            "total_tokens": record.total_tokens,
            "total_steps": record.total_steps,
            "created_at": int(record.created_at),
            "finished_at": int(record.finished_at),
            "exceptions_count": record.exceptions_count,
            "triggered_from": record.triggered_from,
        },
        "details": None,  # Dify fills it only for its console's detailed view
        # Dify starts a triggered run as a Service API run too.
        "created_from": "service-api",
        "created_by_role": "end_user",
        "created_by_account": None,
        "created_by_end_user": _log_user(record),
        "created_at": int(record.created_at),
    }


def _log_user(record: RunRecord) -> dict[str, Any]:
    """Who started the run: the API's user, or for a triggered run Dify's anonymous
    end user of type `trigger` (nobody signed in called the webhook or ticked)."""
    triggered = record.triggered_from != TRIGGERED_APP_RUN
    return {
        "id": end_user_id(record.app_id, record.user_id),
        "type": "trigger" if triggered else "service_api",
        "is_anonymous": triggered,
        "session_id": record.user_id,
    }


def _feedback(record: FeedbackRecord) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid5(_IDS, f"feedback:{record.message_id}")),
        "app_id": record.app_id,
        "conversation_id": record.conversation_id,
        "message_id": record.message_id,
        "rating": record.rating,
        "content": record.content,
        "from_source": "user",
        "from_end_user_id": end_user_id(record.app_id, record.user_id),
        "from_account_id": None,
        "created_at": _iso(record.created_at),
        "updated_at": _iso(record.updated_at),
    }


class _HasStore(Protocol):
    store: Store
    clients: RoutePlanner | None


def conversation(record: ConversationRecord) -> dict[str, Any]:
    """A conversation as Dify lists it (`SimpleConversation`)."""
    return {
        "id": record.id,
        "name": record.name,
        "inputs": record.inputs,
        "status": "normal",
        "introduction": "",
        "created_at": int(record.created_at),
        "updated_at": int(record.updated_at),
    }


class RecordsApi:
    """Handlers of `ServiceApi` over the store (see the module's docstring)."""

    context: _HasStore  # ServiceApi's ServeContext

    @property
    def _store(self) -> Store:
        return self.context.store

    # ---- workflow logs

    def _workflow_logs(self, request: Request, app: App) -> Response:
        query = bodies.validate(LogsQuery, dict(request.args))
        after = before = None
        if query.created_at__after:
            after = _instant(query.created_at__after, "created_at__after")
        if query.created_at__before:
            before = _instant(query.created_at__before, "created_at__before")
        page, total = self._store.run_page(
            app_id=app.workflow.app_id,
            status=query.status,
            keyword=query.keyword or None,
            created_after=after,
            created_before=before,
            page=query.page,
            limit=query.limit,
        )
        return _reply(
            {
                "page": query.page,
                "limit": query.limit,
                "total": total,
                "has_more": query.page * query.limit < total,
                "data": [_run_log(r) for r in page],
            }
        )

    # ---- conversation names and variables

    def _rename_conversation(self, request: Request, app: App, conversation_id: str) -> Response:
        if not app.chat:
            raise not_chat_app()
        body = bodies.validate(RenameBody, bodies.parse_json(bodies.request_body(request)))
        found = self._owned_conversation(app, conversation_id, body.user)
        if body.auto_generate:
            # A title of the first query, from the app's model (the query when that fails).
            first = self._store.messages(conversation_id)[:1]
            name = generate_name(app, self.context.clients, first[0].query) if first else found.name
        else:
            name = (body.name or "").strip()
        self._store.rename_conversation(conversation_id, name)
        renamed = self._store.conversation(conversation_id)
        assert renamed is not None
        return _reply(conversation(renamed))

    def _owned_conversation(self, app: App, conversation_id: str, user: str) -> ConversationRecord:
        found = self._store.conversation(conversation_id)
        if found is None or found.app_id != app.workflow.app_id or found.user_id != user:
            raise not_found("serve.error.noConversation")
        return found

    def _variables_of(self, app: App, conversation_id: str) -> list[dict[str, Any]]:
        found = self._store.conversation(conversation_id)
        stored = self._store.variables(conversation_id)
        created = found.created_at if found else time.time()
        listed = []
        for declared in app.workflow.conversation_variables:
            value = stored.get(declared.name)
            listed.append(
                {
                    "id": variable_id(app.workflow.app_id, declared.name),
                    "name": declared.name,
                    "value_type": declared.value_type,
                    "value": value.value if value is not None else declared.default,
                    "description": "",
                    "created_at": int(created),
                    "updated_at": int(found.updated_at if found else created),
                }
            )
        return listed

    def _conversation_variables(self, request: Request, app: App, conversation_id: str) -> Response:
        if not app.chat:
            raise not_chat_app()
        query = bodies.validate(VariablesQuery, dict(request.args))
        self._owned_conversation(app, conversation_id, query.user)
        listed = self._variables_of(app, conversation_id)
        if query.variable_name:
            listed = [v for v in listed if v["name"] == query.variable_name]
        if query.last_id:
            ids = [v["id"] for v in listed]
            listed = listed[ids.index(query.last_id) + 1 :] if query.last_id in ids else []
        return _reply(
            {
                "limit": query.limit,
                "has_more": len(listed) > query.limit,
                "data": listed[: query.limit],
            }
        )

    def _update_variable(
        self, request: Request, app: App, conversation_id: str, variable: str
    ) -> Response:
        if not app.chat:
            raise not_chat_app()
        body = bodies.validate(VariableBody, bodies.parse_json(bodies.request_body(request)))
        self._owned_conversation(app, conversation_id, body.user)
        declared = next(
            (
                v
                for v in app.workflow.conversation_variables
                if variable_id(app.workflow.app_id, v.name) == variable
            ),
            None,
        )
        if declared is None:
            raise not_found("serve.error.noVariable")
        if not _fits(declared.value_type, body.value):
            raise bad_request(
                "serve.error.variableType",
                name=declared.name,
                expected=declared.value_type,
                got=_type_name(body.value),
            )
        self._store.set_variable(
            conversation_id, declared.name, VariableValue(declared.value_type, body.value)
        )
        listed = self._variables_of(app, conversation_id)
        return _reply(next(v for v in listed if v["id"] == variable))

    # ---- feedback and suggested questions

    def _owned_message(self, app: App, message_id: str, user: str) -> Any:
        found = self._store.message(message_id)
        owner = self._store.conversation(found.conversation_id) if found else None
        if owner is None or owner.app_id != app.workflow.app_id or owner.user_id != user:
            raise not_found("serve.error.noMessage")
        return found

    def _feedback(self, request: Request, app: App, message_id: str) -> Response:
        body = bodies.validate(FeedbackBody, bodies.parse_json(bodies.request_body(request)))
        found = self._owned_message(app, message_id, body.user)
        existing = self._store.feedback(message_id)
        if body.rating is None:
            if existing is None:
                raise invalid_param("serve.error.noFeedbackToRemove")
            self._store.delete_feedback(message_id)
        else:
            now = time.time()
            self._store.set_feedback(
                FeedbackRecord(
                    message_id=message_id,
                    app_id=app.workflow.app_id,
                    conversation_id=found.conversation_id,
                    user_id=body.user,
                    rating=body.rating,
                    content=body.content,
                    created_at=existing.created_at if existing else now,
                    updated_at=now,
                )
            )
        return _reply({"result": "success"})

    def _app_feedbacks(self, request: Request, app: App) -> Response:
        query = bodies.validate(FeedbacksQuery, dict(request.args))
        page = self._store.feedbacks(app_id=app.workflow.app_id, page=query.page, limit=query.limit)
        return _reply({"data": [_feedback(f) for f in page]})

    def _suggested(self, request: Request, app: App, message_id: str) -> Response:
        if not app.chat:
            raise not_chat_app()
        user = request.args.get("user") or ""
        if not user.strip():
            raise invalid_param("serve.error.missingField", field="user")
        found = self._owned_message(app, message_id, user)
        feature = app.features.get("suggested_questions_after_answer") or {}
        if not feature.get("enabled"):
            raise bad_request("serve.error.suggestedOff")
        # The turns up to this message; `suggest_questions` reads the last answered
        # ones (a few more are fetched for the failed turns it skips).
        page, _ = self._store.message_page(
            found.conversation_id, before_id=message_id, limit=3 * SUGGEST_TURNS
        )
        turns = [(m.query, m.answer) for m in (*page, found)]
        questions = suggest_questions(app, self.context.clients, turns)
        return _reply({"result": "success", "data": questions})

    # ---- the site, end users, files

    def _site(self, request: Request, app: App) -> Response:
        return _reply(
            {
                "title": app.name,
                "chat_color_theme": None,
                "chat_color_theme_inverted": False,
                "icon_type": "emoji",
                "icon": None,
                "icon_background": None,
                "icon_url": None,
                "description": app.description,
                "copyright": None,
                "privacy_policy": None,
                "custom_disclaimer": "",
                "default_language": "en-US",
                "show_workflow_steps": True,
                "use_icon_as_answer_icon": False,
            }
        )

    def _end_user(self, request: Request, app: App, end_user: str) -> Response:
        app_id = app.workflow.app_id
        user = next(
            (u for u in self._store.users(app_id) if end_user_id(app_id, u) == end_user), None
        )
        if user is None:
            raise not_found("serve.error.noEndUser")
        return _reply(
            {
                "id": end_user,
                "tenant_id": None,
                "app_id": app_id,
                "type": "service_api",
                "external_user_id": user,
                "name": None,
                "is_anonymous": False,
                "session_id": user,
                "created_at": None,
                "updated_at": None,
            }
        )

    def _file_preview(self, request: Request, app: App, upload_id: str) -> Response:
        query = bodies.validate(PreviewQuery, dict(request.args))
        record = self._store.upload(upload_id)
        if record is None or not Path(record.path).is_file():
            raise ApiError(404, "file_not_found", "serve.error.noSuchFile")
        if record.app_id != app.workflow.app_id:
            raise ApiError(403, "file_access_denied", "serve.error.fileAccessDenied")
        response = Response(Path(record.path).read_bytes(), mimetype=record.mime_type)
        response.headers.update(preview_headers(record.mime_type))
        if query.as_attachment:
            response.headers["Content-Disposition"] = "attachment"
        response.headers["Cache-Control"] = "max-age=3600"
        return response

    # ---- audio: no route here speaks or listens

    def _audio_to_text(self, request: Request, app: App) -> Response:
        if not (app.features.get("speech_to_text") or {}).get("enabled"):
            raise invalid_param("serve.error.speechToTextOff")
        if "file" not in request.files:
            raise ApiError(400, "no_audio_uploaded", "serve.error.noAudio")
        raise ApiError(400, "provider_not_initialize", "serve.error.noAudioModel")

    def _text_to_audio(self, request: Request, app: App) -> Response:
        if not (app.features.get("text_to_speech") or {}).get("enabled"):
            raise invalid_param("serve.error.textToSpeechOff")
        raise ApiError(400, "provider_not_initialize", "serve.error.noAudioModel")


def _reply(data: Any, status: int = 200) -> Response:
    return Response(dump_json(data), status=status, mimetype="application/json")
