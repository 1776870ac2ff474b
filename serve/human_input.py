"""Dify's human-input form endpoints, `GET` / `POST /v1/form/human_input/{token}`
(a part of `ServiceApi`), and what happens when a form closes.

`GET` shows a waiting form of this app (content, inputs, resolved defaults,
actions, `expiration_time`); a form that goes only by email has no token in
its event and is not served here (Dify's 404). `POST {inputs, action, user}`
checks the answer against the form (`nodes/human_input/form.py`): a rejected
answer is 400 `invalid_form_data` and leaves the form open; an accepted one
closes the form in the store (one UPDATE guarded by its state and deadline, so
of two submits, in any processes, one wins and the other is 412
`human_input_form_submitted`) and resumes the run with the node's outputs and
the action's branch (`Runs.resume`). Past its deadline a form is 412
`human_input_form_expired`.

A paused run that is stopped ends here and now (`end_paused`): nothing holds it
to hear a stop. Its open forms close (a later submit is 412
`human_input_form_submitted`), its record says `stopped` (its checkpoint goes
with it), and its stream ends with `workflow_finished` (`stopped`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from firstgate.common.files import FileError, FileRules
from firstgate.locales.localized_error import LocalizedError
from firstgate.nodes.human_input import form as forms
from firstgate.runtime import human_input as hi
from firstgate.runtime.execution import checkpoint as cp
from firstgate.runtime.execution.events import MessageEnd, RunInfo, WorkflowStopped, llm_usage
from firstgate.serve import bodies, uploads
from firstgate.serve.apps import App
from firstgate.serve.bodies import _Body, _user
from firstgate.serve.errors import ApiError, dump_json, not_found
from firstgate.serve.runs import EventSink
from firstgate.store.base import (
    FORM_SUBMITTED,
    FORM_TIMEOUT,
    FORM_WAITING,
    FormRecord,
    RunRecord,
    Store,
)
from pydantic import field_validator
from werkzeug.wrappers import Request, Response


class FormSubmitBody(_Body):
    inputs: dict[str, Any]
    action: str
    user: str

    _user_check = field_validator("user", mode="before")(_user)


class _Context(Protocol):
    store: Store
    runs: Any
    links: Any


def form_definition_reply(form: FormRecord) -> dict[str, Any]:
    """`GET /form/human_input/{token}`'s body (Dify's shape)."""
    definition = form.definition
    return {
        "form_content": definition["form_content"],
        "inputs": definition["inputs"],
        "resolved_default_values": definition["resolved_default_values"],
        "user_actions": definition["actions"],
        "expiration_time": definition["expiration_time"],
    }


def _api_error(exc: LocalizedError) -> ApiError:
    if isinstance(exc, hi.FormSubmitted):
        return ApiError(412, "human_input_form_submitted", exc.message_key, **exc.params)
    if isinstance(exc, hi.FormExpired):
        return ApiError(412, "human_input_form_expired", exc.message_key, **exc.params)
    if isinstance(exc, hi.FormNotFound):
        return not_found(exc.message_key)
    return ApiError(400, "invalid_form_data", exc.message_key, **exc.params)


class HumanInputApi:
    """Handlers of `ServiceApi` for the form endpoints (see the module's docstring)."""

    context: _Context

    def _form_of(self, app: App, token: str) -> FormRecord:
        form = self.context.store.form(token)
        if (
            form is None
            or form.app_id != app.workflow.app_id
            or not form.definition.get("webapp", True)
        ):
            raise not_found("serve.error.noForm")
        return form

    def _get_form(self, request: Request, app: App, token: str) -> Response:
        form = self._form_of(app, token)
        try:
            hi.ensure_waiting(form, time.time())
        except LocalizedError as exc:
            raise _api_error(exc) from None
        return Response(dump_json(form_definition_reply(form)), mimetype="application/json")

    def _submit_form(self, request: Request, app: App, token: str) -> Response:
        body = bodies.validate(FormSubmitBody, bodies.parse_json(bodies.request_body(request)))
        form = self._form_of(app, token)
        if not self.context.runs.resumes_forms:
            raise ApiError(501, "not_implemented", "serve.error.resumeOnWorkers")
        try:
            hi.ensure_waiting(form, time.time())
            closed = hi.answer(
                self.context.store, form, body.action, body.inputs, self._files(request, app)
            )
        except (hi.FormSubmitted, hi.FormExpired, forms.FormInvalid) as exc:
            raise _api_error(exc) from None
        self.context.runs.resume_form(app, closed)
        return Response(b"{}", mimetype="application/json")

    def _files(self, request: Request, app: App) -> Callable[[Any, Mapping[str, Any]], Any]:
        """Resolves a submitted file mapping (an upload of this app, a URL) and
        checks it against the input's rules; a refusal is `invalid_form_data`."""
        store = self.context.store

        def link(upload_id: str) -> str:
            return str(self.context.links.link(request.host_url, upload_id))

        def resolve(value: Any, item: Mapping[str, Any]) -> Any:
            name = str(item["output_variable_name"])
            try:
                found = uploads.resolve_file(value, name, app, store, link)
                rules = FileRules.from_config(
                    item.get("allowed_file_types", ()),
                    item.get("allowed_file_extensions", ()),
                    item.get("allowed_file_upload_methods", ()),
                )
                rules.check(found)
            except ApiError as exc:
                raise ApiError(400, "invalid_form_data", exc.message_key, **exc.params) from None
            except FileError as exc:
                raise ApiError(
                    400,
                    "invalid_form_data",
                    "serve.error.fileInput",
                    input=name,
                    error=exc.render(),
                ) from None
            return found

        return resolve


def end_paused(store: Store, sink: EventSink, info: RunInfo, reason: str) -> None:
    """End a paused run as stopped, by whoever holds it now (see the module's
    docstring): forms first, so a submit racing the stop either won before
    (and the run it queued finds it stopped) or finds its form closed."""
    now = time.time()
    run_id = info.workflow_run_id
    for form in store.run_forms(run_id):
        if form.status == FORM_WAITING:
            status = FORM_SUBMITTED if form.expires_at > now else FORM_TIMEOUT
            store.close_form(form.token, status=status, now=now)
    taken = cp.head(store, run_id)
    totals: dict[str, Any] = cp.decode(taken[0].report) if taken is not None else {}
    elapsed = float(totals.get("elapsed", 0.0))
    known = store.run(run_id)
    if known is not None and known.status in (cp.RUNNING, cp.PAUSED):
        known = dataclasses.replace(
            known, status="stopped", error=reason, finished_at=now, nodes=(), files=()
        )
        store.record_run(known)  # its checkpoint goes in the same transaction
    elif known is None:
        # A chat turn is recorded at its end only: this is its end.
        known = RunRecord(
            id=run_id,
            app_id=info.app_id,
            workflow_id=info.workflow_id,
            mode=info.mode,
            user_id=info.user_id,
            status="stopped",
            inputs={},
            outputs={},
            error=reason,
            elapsed_time=elapsed,
            total_tokens=int(totals.get("tokens", 0)),
            total_steps=int(totals.get("steps", 0)),
            exceptions_count=int(totals.get("exceptions", 0)),
            created_at=float(info.created_at),
            finished_at=now,
        )
        store.record_run(known)
    else:
        store.delete_checkpoint(run_id)  # it had ended: what is left of it goes
    sink.publish(
        WorkflowStopped(
            run=info,
            elapsed=elapsed,
            finished_at=int(now),
            reason=reason,
            error_message=reason,
            outputs=dict(known.outputs),
            total_tokens=known.total_tokens,
            total_steps=known.total_steps,
            exceptions_count=known.exceptions_count,
        ).to_dict()
    )
    if info.chat:
        usage = llm_usage(dict(totals.get("usage", {})), latency=elapsed)
        answer = str(totals.get("answer", ""))
        sink.publish(MessageEnd(run=info, elapsed=elapsed, answer=answer, usage=usage).to_dict())
    sink.end()
