"""Dify's Service API over a directory of exports, as a WSGI application.

Routes, request bodies, replies and error bodies follow Dify's
`api/controllers/service_api/`; the key in `Authorization: Bearer ...` picks
the app. The run console is served from `/` by the same application.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firstgate.common import metrics
from firstgate.common.files import DEFAULT_SIZE_LIMITS, MB, FileType
from firstgate.locales import DEFAULT_LOCALE, catalog, normalize_locale, t
from firstgate.nodes.base import RoutePlanner
from firstgate.runtime.settings import RuntimeSettings
from firstgate.serve import bodies, chat_app, uploads, webhooks
from firstgate.serve.access_log import APP_ENVIRON_KEY
from firstgate.serve.agent_chat import AGENT_CHAT_MODE, AgentChatReply, message_thoughts
from firstgate.serve.agent_chat import blocking_refused as agent_blocking_refused
from firstgate.serve.apps import App, AppDirectory
from firstgate.serve.completion import CompletionBody, CompletionReply, not_completion_app
from firstgate.serve.errors import (
    ApiError,
    dump_json,
    invalid_param,
    not_chat_app,
    not_found,
    not_workflow_app,
    unauthorized,
)
from firstgate.serve.file_links import FileLinks, preview_headers
from firstgate.serve.human_input import HumanInputApi
from firstgate.serve.launch import RunRequest
from firstgate.serve.records import RecordsApi, conversation
from firstgate.serve.runs import EventSource, RunHandle, Runs
from firstgate.store.base import ConversationRecord, MessageRecord, RunRecord, Store
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

log = logging.getLogger("firstgate.serve")

# A `ping` event after this many seconds without another event (Dify's interval).
PING_INTERVAL_S = 10.0
DEFAULT_USER = "DEFAULT-USER"  # Dify's end user when a request names none
MAX_JSON_BYTES = bodies.MAX_JSON_BYTES
# A `traceparent` is 55 characters; anything longer is cut (and then refused as malformed).
TRACEPARENT_MAX = 256
CONSOLE_DIR = Path(__file__).parent / "console"
# The console's own words, in the browser's language (Accept-Language).
CONSOLE_KEYS = (
    "console.app",
    "console.key",
    "console.user",
    "console.run",
    "console.stop",
    "console.answer",
    "console.timeline",
    "console.node",
    "console.type",
    "console.status",
    "console.time",
    "console.message",
    "console.newConversation",
    "console.enterKey",
    "console.running",
    "console.firstToken",
    "console.waiting",
    "console.retry",
    "console.fallback",
    "console.outputs",
    "console.history",
    "console.allStatuses",
    "console.refresh",
    "console.round",
    "console.waitingFirstToken",
    "console.required",
    "console.inputs",
    "console.prompt",
    "console.processData",
    "console.handledBy",
    "console.handler.failBranch",
    "console.handler.defaultValue",
    "console.handler.retry",
    "console.tokenCount",
    "console.tokenRate",
    "console.runId",
    "console.totalTime",
    "console.steps",
    "console.noRuns",
    "console.tokens",
    "console.form.expires",
    "console.form.sent",
    "console.form.failed",
)
# The runtime's words the console shows itself, in the browser's language: what a
# wait and a fallback decision say (their events carry the key and the params).
CONSOLE_EVENT_KEYS = "watchdog."
_CONSOLE_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


@dataclass(slots=True)
class ServeContext:
    """What every request may use."""

    apps: AppDirectory
    store: Store
    runs: Runs
    uploads_dir: Path
    settings: RuntimeSettings | None
    # The model routes of this process, for the app's own model calls (a
    # conversation's name, suggested questions); None where no runs execute.
    clients: RoutePlanner | None = None
    ping_interval: float = PING_INTERVAL_S
    links: FileLinks = field(default_factory=FileLinks)
    # Where file links point (`file_links.files_base_url`); set once the address is known.
    files_url: str = ""
    # The apps' webhook triggers by id, and the most a webhook body may carry.
    hooks: dict[str, webhooks.Webhook] = field(default_factory=dict)
    webhook_max_body: int = webhooks.DEFAULT_MAX_BODY


def _rules() -> Map:
    return Map(
        [
            Rule("/", endpoint="console_index", methods=["GET"]),
            Rule("/console/apps", endpoint="console_apps", methods=["GET"]),
            Rule("/console/strings", endpoint="console_strings", methods=["GET"]),
            Rule("/console/<name>", endpoint="console_file", methods=["GET"]),
            Rule("/files/<upload_id>/file-preview", endpoint="public_file", methods=["GET"]),
            Rule("/metrics", endpoint="public_metrics", methods=["GET"]),
            Rule("/v1/info", endpoint="info", methods=["GET"]),
            # Dify's webhook trigger: any method (a wrong one is the webhook's 400).
            Rule(
                "/triggers/webhook/<webhook_id>",
                endpoint="webhook",
                methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
            ),
            Rule("/v1/meta", endpoint="meta", methods=["GET"]),
            Rule("/v1/parameters", endpoint="parameters", methods=["GET"]),
            Rule("/v1/files/upload", endpoint="upload", methods=["POST"]),
            Rule("/v1/workflows/run", endpoint="run_workflow", methods=["POST"]),
            Rule("/v1/workflows/run/<run_id>", endpoint="workflow_run", methods=["GET"]),
            Rule("/v1/workflows/run/<run_id>/timeline", endpoint="run_timeline", methods=["GET"]),
            Rule("/v1/workflows/tasks/<task_id>/stop", endpoint="stop", methods=["POST"]),
            Rule("/v1/workflow/<run_id>/events", endpoint="run_events", methods=["GET"]),
            Rule("/v1/chat-messages", endpoint="chat", methods=["POST"]),
            Rule("/v1/chat-messages/<task_id>/stop", endpoint="stop_chat", methods=["POST"]),
            Rule("/v1/completion-messages", endpoint="completion", methods=["POST"]),
            Rule(
                "/v1/completion-messages/<task_id>/stop",
                endpoint="stop_completion",
                methods=["POST"],
            ),
            Rule("/v1/messages", endpoint="messages", methods=["GET"]),
            Rule("/v1/conversations", endpoint="conversations", methods=["GET"]),
            Rule(
                "/v1/conversations/<conversation_id>",
                endpoint="delete_conversation",
                methods=["DELETE"],
            ),
            Rule(
                "/v1/conversations/<conversation_id>/name",
                endpoint="rename_conversation",
                methods=["POST"],
            ),
            Rule(
                "/v1/conversations/<conversation_id>/variables",
                endpoint="conversation_variables",
                methods=["GET"],
            ),
            Rule(
                "/v1/conversations/<conversation_id>/variables/<variable>",
                endpoint="update_variable",
                methods=["PUT"],
            ),
            Rule("/v1/workflows/logs", endpoint="workflow_logs", methods=["GET"]),
            Rule("/v1/messages/<message_id>/feedbacks", endpoint="feedback", methods=["POST"]),
            Rule("/v1/messages/<message_id>/suggested", endpoint="suggested", methods=["GET"]),
            Rule("/v1/app/feedbacks", endpoint="app_feedbacks", methods=["GET"]),
            Rule("/v1/site", endpoint="site", methods=["GET"]),
            Rule("/v1/end-users/<end_user>", endpoint="end_user", methods=["GET"]),
            Rule("/v1/files/<upload_id>/preview", endpoint="file_preview", methods=["GET"]),
            Rule("/v1/audio-to-text", endpoint="audio_to_text", methods=["POST"]),
            Rule("/v1/form/human_input/<token>", endpoint="get_form", methods=["GET"]),
            Rule("/v1/form/human_input/<token>", endpoint="submit_form", methods=["POST"]),
            Rule("/v1/text-to-audio", endpoint="text_to_audio", methods=["POST"]),
        ],
        strict_slashes=False,
    )


def _locale(request: Request) -> str | None:
    header = request.headers.get("Accept-Language", "")
    first = header.split(",", 1)[0].split(";", 1)[0].strip()
    return normalize_locale(first) if first else None


def _json(data: Any, status: int = 200) -> Response:
    return Response(dump_json(data), status=status, mimetype="application/json")


def _error(error: ApiError, locale: str | None) -> Response:
    response = Response(error.encoded(locale), status=error.status, mimetype="application/json")
    if error.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


def _http_error(exc: HTTPException) -> ApiError:
    # Dify's code for werkzeug's errors: the class name in snake case.
    name = type(exc).__name__
    code = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
    return ApiError(exc.code or 500, code, "serve.error.http", http_status=exc.code or 500)


def sse(event: bytes) -> bytes:
    """One event (its JSON text) as Server-Sent Events: Dify's `data: {json}` frame."""
    return b"data: " + event + b"\n\n"


PING = b"event: ping\n\n"


class ServiceApi(RecordsApi, HumanInputApi):
    def __init__(self, context: ServeContext) -> None:
        self.context = context
        self.urls = _rules()

    # ---- WSGI

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        request = Request(environ)
        # One byte past the limit: werkzeug cuts a chunked body (no Content-Length)
        # at the limit instead of refusing it, so `_body` needs to see the excess.
        request.max_content_length = MAX_JSON_BYTES + 1
        response = self.dispatch(request)
        return response(environ, start_response)

    def dispatch(self, request: Request) -> Response:
        locale = _locale(request)
        try:
            endpoint, values = self.urls.bind_to_environ(request.environ).match()
            _refuse_nul(values.items(), request.args.items(multi=True))
            handler = getattr(self, f"_{endpoint}")
            if endpoint.startswith(("console", "public", "webhook")):
                return handler(request, **values)
            app = self._app(request)
            request.environ[APP_ENVIRON_KEY] = app.stem  # for the access log
            return handler(request, app, **values)
        except ApiError as exc:
            return _error(exc, locale)
        except HTTPException as exc:
            return _error(_http_error(exc), locale)
        except Exception:  # noqa: BLE001 - logged here; the client gets Dify's 500 body
            log.exception("request %s %s failed", request.method, request.path)
            return _error(ApiError(500, "internal_server_error", "serve.error.internal"), locale)

    def _app(self, request: Request) -> App:
        header = request.headers.get("Authorization")
        if header is None or " " not in header.strip():
            raise unauthorized("serve.error.noBearer")
        scheme, _, key = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            raise unauthorized("serve.error.notBearer")
        app = self.context.apps.by_key(key.strip())
        if app is None:
            raise unauthorized("serve.error.badKey")
        return app

    # ---- the console

    def _webhook(self, request: Request, webhook_id: str) -> Response:
        """A webhook trigger's call: no API key, the id is the secret (Dify)."""
        hook = self.context.hooks.get(webhook_id)
        if hook is not None:
            request.environ[APP_ENVIRON_KEY] = hook.app.stem  # for the access log
        return webhooks.handle(
            request,
            hook,
            self.context.runs,
            self._keep_webhook_file,
            limit=self.context.webhook_max_body,
            base_url=self.context.files_url,
            locale=_locale(request),
        )

    def _keep_webhook_file(self, app: App, filename: str, data: bytes) -> dict[str, Any]:
        record = uploads.store_bytes(
            app,
            webhooks.WEBHOOK_USER,
            filename,
            data,
            directory=self.context.uploads_dir,
            store=self.context.store,
        )
        return uploads.local_file(record)

    def _console_index(self, request: Request) -> Response:
        return self._console_file(request, "index.html")

    def _console_file(self, request: Request, name: str) -> Response:
        path = CONSOLE_DIR / name
        kind = _CONSOLE_TYPES.get(path.suffix)
        if "/" in name or kind is None or not path.is_file():
            raise not_found("serve.error.noSuchPage")
        response = Response(path.read_bytes(), mimetype=kind)
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'"
        )
        return response

    def _console_strings(self, request: Request) -> Response:
        locale = _locale(request)
        keys = [
            *CONSOLE_KEYS,
            *(k for k in catalog(DEFAULT_LOCALE) if k.startswith(CONSOLE_EVENT_KEYS)),
        ]
        return _json({key: t(key, locale) for key in keys})

    def _console_apps(self, request: Request) -> Response:
        return _json(
            {
                "data": [
                    {"stem": a.stem, "name": a.name, "mode": a.mode, "description": a.description}
                    for a in self.context.apps.apps.values()
                ]
            }
        )

    def _public_file(self, request: Request, upload_id: str) -> Response:
        args = request.args
        valid = self.context.links.valid(
            upload_id, args.get("timestamp", ""), args.get("nonce", ""), args.get("sign", "")
        )
        record = self.context.store.upload(upload_id) if valid else None
        if record is None:
            raise ApiError(403, "forbidden", "serve.error.badLink")
        response = Response(Path(record.path).read_bytes(), mimetype=record.mime_type)
        response.headers.update(preview_headers(record.mime_type))
        return response

    def _public_metrics(self, request: Request) -> Response:
        """Prometheus's scrape: no key (an operator's endpoint; counts and app
        names, no ids, no content)."""
        return Response(metrics.exposition(), content_type=metrics.CONTENT_TYPE)

    # ---- the app

    def _info(self, request: Request, app: App) -> Response:
        return _json(
            {
                "name": app.name,
                "description": app.description,
                "tags": [],
                "mode": app.mode,
                "author_name": "",
            }
        )

    def _meta(self, request: Request, app: App) -> Response:
        return _json({"tool_icons": {}})

    def _parameters(self, request: Request, app: App) -> Response:
        return _json(parameters(app))

    # ---- files

    def _upload(self, request: Request, app: App) -> Response:
        request.max_content_length = uploads.largest_limit(app) + MB
        given = request.files.getlist("file")
        if len(request.files) > 1 or len(given) > 1:
            raise ApiError(400, "too_many_files", "serve.error.tooManyFiles")
        if not given:
            raise ApiError(400, "no_file_uploaded", "serve.error.noFile")
        _refuse_nul(request.form.items(multi=True))
        user = request.form.get("user") or DEFAULT_USER
        record = uploads.save_upload(
            app,
            user,
            given[0].filename or "",
            given[0].stream,
            directory=self.context.uploads_dir,
            store=self.context.store,
        )
        return _json(
            {
                "id": record.id,
                "name": record.name,
                "size": record.size,
                "extension": record.extension,
                "mime_type": record.mime_type,
                "created_by": record.user_id,
                "created_at": int(record.created_at),
                "preview_url": None,
                "source_url": None,
                "original_url": None,
                "user_id": record.user_id,
                "tenant_id": None,
                "conversation_id": None,
                "file_key": None,
            },
            201,
        )

    # ---- runs

    def _run_workflow(self, request: Request, app: App) -> Response:
        if app.chat or app.completion:
            raise not_workflow_app()
        if app.workflow.triggered:
            raise ApiError(400, "invalid_param", "serve.error.triggerApp")
        body = bodies.validate(bodies.WorkflowRunBody, bodies.parse_json(_body(request)))
        handle = self._start(
            app,
            body.inputs,
            body.user,
            body.files,
            query=None,
            conversation=None,
            base_url=self.context.files_url,
            traceparent=request.headers.get("traceparent"),
        )
        if body.response_mode == "streaming":
            return self._streaming(handle)
        return _json(workflow_reply(handle, _wait(handle.stream)))

    def _chat(self, request: Request, app: App) -> Response:
        if not app.chat:
            raise not_chat_app()
        body = bodies.validate(bodies.ChatBody, bodies.parse_json(_body(request)))
        agent = app.mode == AGENT_CHAT_MODE
        if agent and body.response_mode != "streaming":
            raise agent_blocking_refused()
        if body.conversation_id is not None:
            self._conversation(app, body.conversation_id, body.user)
        handle = self._start(
            app,
            body.inputs,
            body.user,
            body.files,
            query=body.query,
            conversation=body.conversation_id,
            base_url=self.context.files_url,
            traceparent=request.headers.get("traceparent"),
        )
        if agent:
            return self._translated_stream(handle, AgentChatReply(handle).frames)
        if body.response_mode == "streaming":
            if app.mode == chat_app.CHAT_MODE:
                return self._translated_stream(handle, chat_app.frames)
            return self._streaming(handle)
        return _json(chat_reply(handle, app, _wait(handle.stream)))

    def _completion(self, request: Request, app: App) -> Response:
        if not app.completion:
            raise not_completion_app()
        body = bodies.validate(CompletionBody, bodies.parse_json(_body(request)))
        handle = self._start(
            app,
            body.inputs,
            body.user,
            body.files,
            query=None,
            conversation=None,
            base_url=request.host_url,
            traceparent=request.headers.get("traceparent"),
        )
        reply = CompletionReply(handle, app.workflow.easy)
        if body.response_mode == "streaming":
            return self._translated_stream(handle, reply.frames)
        return _json(reply.blocking(_wait(handle.stream)))

    def _start(
        self,
        app: App,
        inputs: dict[str, Any],
        user: str,
        files: list[dict[str, Any]] | None,
        *,
        query: str | None,
        conversation: str | None,
        base_url: str,
        traceparent: str | None = None,
    ) -> RunHandle:
        runs = self.context.runs
        if not runs.accepting:
            raise ApiError(503, "service_unavailable", "serve.error.draining")
        request = RunRequest(
            app_stem=app.stem,
            inputs=inputs,
            user=user,
            files=files,
            query=query,
            conversation_id=conversation,
            base_url=base_url,
            # A caller's trace continues into the run; a malformed one is ignored there.
            traceparent=traceparent[:TRACEPARENT_MAX] if traceparent else None,
        )
        return runs.start(app, request)

    def _streaming(self, handle: RunHandle) -> Response:
        # Numbered from the first frame, as the events endpoint numbers them: a
        # client that loses this stream resumes with the last `id` it saw.
        return self._event_stream(handle.stream.follow(self.context.ping_interval))

    def _translated_stream(
        self, handle: RunHandle, translate: Callable[[bytes], list[bytes]]
    ) -> Response:
        """Another app mode's events (a chat, completion or agent app's), unnumbered as Dify's."""

        def frames() -> Iterator[bytes]:
            metrics.stream_opened()
            try:
                for event in handle.stream.follow(self.context.ping_interval):
                    if event is None:
                        yield PING
                    else:
                        yield from (sse(frame) for frame in translate(event))
            finally:
                metrics.stream_closed()

        response = Response(frames(), mimetype="text/event-stream", direct_passthrough=True)
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Accel-Buffering"] = "no"
        return response

    def _stop(self, request: Request, app: App, task_id: str) -> Response:
        if app.chat or app.completion:
            raise not_workflow_app()
        return self._stop_task(request, app, task_id)

    def _stop_chat(self, request: Request, app: App, task_id: str) -> Response:
        if not app.chat:
            raise not_chat_app()
        return self._stop_task(request, app, task_id)

    def _stop_completion(self, request: Request, app: App, task_id: str) -> Response:
        if not app.completion:
            raise not_completion_app()
        return self._stop_task(request, app, task_id)

    def _stop_task(self, request: Request, app: App, task_id: str) -> Response:
        body = bodies.validate(bodies.UserBody, bodies.parse_json(_body(request)))
        # Dify answers success whether or not the task was running (a stop flag).
        self.context.runs.stop(task_id, app=app, user=body.user, reason=t("serve.stoppedByUser"))
        return _json({"result": "success"})

    def _workflow_run(self, request: Request, app: App, run_id: str) -> Response:
        record = self.context.store.run(run_id)
        if record is not None and record.app_id == app.workflow.app_id:
            return _json(_run_record(record))
        live = self.context.runs.by_run_id(run_id)
        if live is None or live.app_id != app.workflow.app_id:
            raise not_found("serve.error.noRun")
        started = live.stream.events()[:1]
        return _json(
            {
                "id": live.workflow_run_id,
                "workflow_id": app.workflow.workflow_id,
                "status": "running",
                "inputs": started[0]["data"].get("inputs", {}) if started else {},
                "outputs": {},
                "error": None,
                "total_steps": 0,
                "total_tokens": 0,
                "created_at": int(live.started_at),
                "finished_at": None,
                "elapsed_time": 0.0,
            }
        )

    def _run_events(self, request: Request, app: App, run_id: str) -> Response:
        """Dify's `GET /workflow/{id}/events?user=`: a run's stream again, from its start
        or, with `Last-Event-ID` (or `last_event_id`), after the events a client saw.
        Each frame carries its position as the SSE `id`, so a client that reconnects
        with the last one it saw resumes without a loss or a repeat. A finished run
        whose events are no longer kept is its `workflow_finished` alone (Dify).

        A paused run's stream ends at `workflow_paused` unless `continue_on_pause`
        (then it goes on through the resumption, pause after pause);
        `include_state_snapshot` first replays a `node_finished` for each node the
        run finished where its earlier events are not kept here (it paused in
        another process, or before a restart)."""
        user = request.args.get("user") or ""
        if not user:
            raise invalid_param("serve.error.input", error="user")
        last = request.headers.get("Last-Event-ID") or request.args.get("last_event_id") or "0"
        if not (last.isascii() and last.isdigit()) or len(last) > 9:  # `²` is a digit to isdigit
            raise invalid_param("serve.error.input", error="Last-Event-ID")
        through = _flag(request, "continue_on_pause")
        snapshot = _flag(request, "include_state_snapshot")
        runs = self.context.runs
        handle = runs.by_run_id(run_id) or runs.get(run_id)
        if handle is not None and handle.app_id == app.workflow.app_id and handle.user == user:
            after = int(last)
            first = getattr(handle.stream, "first", 0)
            replay: list[bytes] = []
            if after < first:
                # The events before `first` are gone: the reader's count starts
                # there (read in several batches, it would see some twice).
                if snapshot:
                    record = self.context.store.run(handle.workflow_run_id)
                    replay = [dump_json(e) for e in _snapshot_events(record, handle.task_id)]
                after = first
            live = handle.stream.follow(self.context.ping_interval, after, through_pauses=through)
            return self._event_stream(itertools.chain(replay, live), after - len(replay))
        record = self.context.store.run(run_id)
        if record is None or record.app_id != app.workflow.app_id or record.user_id != user:
            raise not_found("serve.error.noRun")
        events = _snapshot_events(record, record.id) if snapshot else []
        closing = "workflow_paused" if record.status == "paused" else "workflow_finished"
        events.append(
            {
                "event": closing,
                "workflow_run_id": record.id,
                "task_id": record.id,
                "data": _run_record(record),
            }
        )
        return self._event_stream(iter([dump_json(e) for e in events]))

    def _event_stream(self, events: Iterator[bytes | None], first: int = 0) -> Response:
        def frames() -> Iterator[bytes]:
            position = first
            metrics.stream_opened()
            try:
                for event in events:
                    if event is None:
                        yield PING
                        continue
                    position += 1
                    yield b"id: %d\n" % position + sse(event)
            finally:
                metrics.stream_closed()

        response = Response(frames(), mimetype="text/event-stream", direct_passthrough=True)
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Accel-Buffering"] = "no"
        return response

    # ---- conversations

    def _conversation(self, app: App, conversation_id: str, user: str) -> ConversationRecord:
        found = self.context.store.conversation(conversation_id)
        if found is None or found.app_id != app.workflow.app_id or found.user_id != user:
            raise not_found("serve.error.noConversation")
        return found

    def _messages(self, request: Request, app: App) -> Response:
        if not app.chat:
            raise not_chat_app()
        query = bodies.validate(bodies.MessagesQuery, dict(request.args))
        self._conversation(app, query.conversation_id, query.user)
        try:
            page, more = self.context.store.message_page(
                query.conversation_id, before_id=query.first_id, limit=query.limit
            )
        except KeyError:
            raise not_found("serve.error.noFirstMessage") from None
        rated = self.context.store.ratings([m.id for m in page])
        agent = app.mode == AGENT_CHAT_MODE
        return _json(
            {
                "limit": query.limit,
                "has_more": more,
                "data": [
                    message(m, rated.get(m.id), self._thoughts(m) if agent else []) for m in page
                ],
            }
        )

    def _thoughts(self, record: MessageRecord) -> list[dict[str, Any]]:
        """An agent app's message's rounds, from its run's agent node."""
        run = self.context.store.run(record.workflow_run_id) if record.workflow_run_id else None
        agents = [n.process_data for n in run.nodes if n.node_type == "agent"] if run else []
        return message_thoughts(agents, record.id, int(record.created_at))

    def _conversations(self, request: Request, app: App) -> Response:
        if not app.chat:
            raise not_chat_app()
        query = bodies.validate(bodies.ConversationsQuery, dict(request.args))
        try:
            page, more = self.context.store.conversations(
                app_id=app.workflow.app_id,
                user_id=query.user,
                after_id=query.last_id,
                limit=query.limit,
                sort_by=query.sort_by,
            )
        except KeyError:
            raise not_found("serve.error.noLastConversation") from None
        return _json(
            {"limit": query.limit, "has_more": more, "data": [conversation(c) for c in page]}
        )

    def _delete_conversation(self, request: Request, app: App, conversation_id: str) -> Response:
        if not app.chat:
            raise not_chat_app()
        raw = _body(request)
        user = bodies.validate(bodies.UserBody, bodies.parse_json(raw)).user if raw.strip() else ""
        deleted = self.context.store.delete_conversation(
            conversation_id, app_id=app.workflow.app_id, user_id=user or DEFAULT_USER
        )
        if not deleted:
            raise not_found("serve.error.noConversation")
        return Response(status=204)


_body = bodies.request_body


def _refuse_nul(*pairs: Iterable[tuple[str, str]]) -> None:
    """A NUL in a path segment, a query or a form field is Dify's 400: PostgreSQL's
    text cannot hold one (werkzeug already decodes bad UTF-8 there as U+FFFD)."""
    for name, value in itertools.chain(*pairs):
        if "\x00" in name or "\x00" in value:
            raise invalid_param("serve.error.badText", field=name.replace("\x00", "\ufffd"))


def _wait(stream: EventSource) -> list[dict[str, Any]]:
    """Every event of the run, once it has ended (a blocking reply)."""
    for _ in stream.follow(PING_INTERVAL_S):
        pass
    return stream.events()


def _flag(request: Request, name: str) -> bool:
    return (request.args.get(name) or "").strip().lower() in ("1", "true", "yes")


def _snapshot_events(record: RunRecord | None, task_id: str) -> list[dict[str, Any]]:
    """A `node_finished` per node execution the store has of the run (Dify's
    `include_state_snapshot` replay)."""
    if record is None:
        return []
    return [
        {
            "event": "node_finished",
            "workflow_run_id": record.id,
            "task_id": task_id,
            "data": {
                "id": node.id,
                "node_id": node.node_id,
                "node_type": node.node_type,
                "title": node.title,
                "index": node.index,
                "predecessor_node_id": node.predecessor_node_id,
                "inputs": node.inputs,
                "process_data": node.process_data,
                "outputs": node.outputs,
                "status": node.status,
                "error": node.error,
                "elapsed_time": node.elapsed_time,
                "execution_metadata": node.execution_metadata,
                "created_at": int(node.created_at),
                "finished_at": int(node.finished_at),
            },
        }
        for node in sorted(record.nodes, key=lambda n: n.index)
    ]


def _run_record(record: RunRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "workflow_id": record.workflow_id,
        "status": record.status,
        "inputs": record.inputs,
        "outputs": record.outputs,
        "error": record.error,
        "total_steps": record.total_steps,
        "total_tokens": record.total_tokens,
        "created_at": int(record.created_at),
        "finished_at": int(record.finished_at),
        "elapsed_time": record.elapsed_time,
    }


def _find(events: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((e for e in reversed(events) if e.get("event") == name), None)


def workflow_reply(handle: RunHandle, events: list[dict[str, Any]]) -> dict[str, Any]:
    # A run that paused at a human-input node replies with where it stands.
    finished = _find(events, "workflow_finished") or _find(events, "workflow_paused")
    if finished is None:
        raise ApiError(500, "internal_server_error", "serve.error.internal")
    return {
        "task_id": handle.task_id,
        "workflow_run_id": handle.workflow_run_id,
        "data": finished["data"],
    }


def chat_reply(handle: RunHandle, app: App, events: list[dict[str, Any]]) -> dict[str, Any]:
    # A turn paused at a human-input node replies with the answer so far.
    ended = _find(events, "message_end") or _find(events, "workflow_paused")
    if ended is None:
        failure = _find(events, "error") or {}
        raise ApiError(
            400,
            "completion_request_error",
            "serve.error.runFailed",
            error=str(failure.get("message") or ""),
        )
    answer = "".join(str(e.get("answer", "")) for e in events if e.get("event") == "message")
    return {
        "event": "message",
        "task_id": handle.task_id,
        "id": ended.get("message_id"),
        "message_id": ended.get("message_id"),
        "conversation_id": ended.get("conversation_id"),
        "mode": app.mode,
        "answer": answer,
        "metadata": ended.get("metadata", {}),
        "created_at": ended.get("created_at"),
    }


def message(
    record: MessageRecord,
    rating: str | None = None,
    agent_thoughts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "id": record.id,
        "conversation_id": record.conversation_id,
        "parent_message_id": None,
        "inputs": record.inputs,
        "query": record.query,
        "answer": record.answer,
        "message_files": [],
        "feedback": {"rating": rating} if rating else None,
        "retriever_resources": [],
        "agent_thoughts": agent_thoughts or [],
        "created_at": int(record.created_at),
        "status": record.status,
        "error": record.error,
        # Not in Dify's Service API (its console API has it): the run console opens
        # a turn's timeline by it.
        "workflow_run_id": record.workflow_run_id,
    }


# Dify's defaults for the features an export does not set (`/parameters`).
_FEATURE_DEFAULTS: dict[str, Any] = {
    "suggested_questions_after_answer": {"enabled": False},
    "speech_to_text": {"enabled": False},
    "text_to_speech": {"enabled": False},
    "retriever_resource": {"enabled": False},
    "annotation_reply": {"enabled": False},
    "more_like_this": {"enabled": False},
    "sensitive_word_avoidance": {"enabled": False, "type": "", "configs": []},
}
WORKFLOW_FILE_UPLOAD_LIMIT = 10  # Dify's WORKFLOW_FILE_UPLOAD_LIMIT (files per input)


def parameters(app: App) -> dict[str, Any]:
    features = app.features
    config = app.workflow.upload_config
    limits = {
        kind: config.get(key) or DEFAULT_SIZE_LIMITS[kind] // MB
        for kind, key in (
            (FileType.IMAGE, "image_file_size_limit"),
            (FileType.VIDEO, "video_file_size_limit"),
            (FileType.AUDIO, "audio_file_size_limit"),
            (FileType.DOCUMENT, "file_size_limit"),
        )
    }
    reply: dict[str, Any] = {
        "opening_statement": features.get("opening_statement"),
        "suggested_questions": features.get("suggested_questions") or [],
    }
    for name, default in _FEATURE_DEFAULTS.items():
        reply[name] = features.get(name) or default
    reply["user_input_form"] = [{v.get("type", "text-input"): v} for v in app.start_variables]
    reply["file_upload"] = features.get("file_upload") or {
        "image": {
            "enabled": False,
            "number_limits": 3,
            "detail": "high",
            "transfer_methods": ["remote_url", "local_file"],
        }
    }
    reply["system_parameters"] = {
        "image_file_size_limit": limits[FileType.IMAGE],
        "video_file_size_limit": limits[FileType.VIDEO],
        "audio_file_size_limit": limits[FileType.AUDIO],
        "file_size_limit": limits[FileType.DOCUMENT],
        "workflow_file_upload_limit": config.get("workflow_file_upload_limit")
        or WORKFLOW_FILE_UPLOAD_LIMIT,
    }
    return reply
