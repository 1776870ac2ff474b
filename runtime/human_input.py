"""Answering a paused run's human-input form, wherever that happens: serve's
form endpoint, `firstgate run` at a terminal, `firstgate resume`, the sweeper
of forms past their deadline.

A form closes once (`Store.close_form`, one guarded UPDATE): by the first
accepted answer, or by its deadline. Whoever closed it resumes the run
(`Workflow.resume`, from the run's checkpoint in the store) with the node's
outputs and branch (`resolved_for`): the answer's action, or `__timeout`;
the resumed run sends `human_input_form_filled` (or `human_input_form_timeout`)
first, then the node's `node_finished`, then the rest under the same ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from firstgate.locales.localized_error import LocalizedError
from firstgate.nodes.base import NodeNotice
from firstgate.nodes.human_input import form as forms
from firstgate.runtime.execution.checkpoint import Resolved
from firstgate.store.base import FORM_SUBMITTED, FORM_TIMEOUT, FormRecord, Store

if TYPE_CHECKING:
    from firstgate.runtime.execution.engine import WorkflowRun
    from firstgate.runtime.execution.resources import RunResources
    from firstgate.runtime.execution.session import RunOptions
    from firstgate.runtime.workflow import Workflow


class FormNotFound(LocalizedError):
    message_key = "serve.error.noForm"


class FormSubmitted(LocalizedError):
    message_key = "serve.error.formSubmitted"


class FormExpired(LocalizedError):
    message_key = "serve.error.formExpired"


def open_form(store: Store, token: str, now: float | None = None) -> FormRecord:
    """The waiting form of `token`, or FormNotFound / FormSubmitted / FormExpired."""
    form = store.form(token)
    if form is None:
        raise FormNotFound()
    ensure_waiting(form, time.time() if now is None else now)
    return form


def ensure_waiting(form: FormRecord, now: float) -> None:
    if form.status == FORM_SUBMITTED:
        raise FormSubmitted(id=form.id)
    if form.status == FORM_TIMEOUT or form.expires_at <= now:
        raise FormExpired(id=form.id)


def answer(
    store: Store,
    form: FormRecord,
    action: Any,
    inputs: Any,
    resolve_file: Callable[[Any, Mapping[str, Any]], Any] | None = None,
) -> FormRecord:
    """Check an answer (FormInvalid leaves the form open) and close the form with
    it; FormSubmitted / FormExpired when another answer or the deadline closed it
    first. The closed form, ready for `resume`."""
    values = forms.check_submission(form.definition, action, inputs, resolve_file)
    now = time.time()
    if not store.close_form(
        form.token,
        status=FORM_SUBMITTED,
        now=now,
        action_id=str(action),
        submission=forms.stored_values(values),
    ):
        again = store.form(form.token)
        if again is not None and again.status == FORM_SUBMITTED:
            raise FormSubmitted(id=form.id)
        raise FormExpired(id=form.id)
    closed = store.form(form.token)
    assert closed is not None  # forms are never deleted
    return closed


def close_due(store: Store, now: float | None = None, limit: int = 100) -> list[FormRecord]:
    """Close every form past its deadline that nobody answered; the ones closed
    here (exactly once across processes), for `resume`."""
    moment = time.time() if now is None else now
    closed: list[FormRecord] = []
    for form in store.due_forms(moment, limit):
        if store.close_form(form.token, status=FORM_TIMEOUT, now=moment):
            again = store.form(form.token)
            if again is not None:
                closed.append(again)
    return closed


def resolved_for(form: FormRecord) -> dict[str, Resolved]:
    """How the paused node finishes: outputs, handle and the event before its end."""
    definition = form.definition
    if form.status == FORM_TIMEOUT:
        outputs, handle = forms.timeout_outputs(definition)
        notice = NodeNotice("human_input_form_timeout", forms.timeout_data(definition))
    else:
        values = {k: forms.file_back(v) for k, v in (form.submission or {}).items()}
        outputs, handle = forms.answer_outputs(definition, str(form.action_id), values)
        notice = NodeNotice(
            "human_input_form_filled", forms.filled_data(definition, str(form.action_id), values)
        )
    return {
        form.node_id: Resolved(
            outputs=outputs,
            handle=handle,
            inputs={},
            process_data={"form_id": form.id, "action_id": outputs[forms.ACTION_ID]},
            events=(notice,),
        )
    }


def resume(
    workflow: Workflow,
    form: FormRecord,
    resources: RunResources,
    options: RunOptions | None = None,
) -> WorkflowRun:
    """The paused run of a closed form, going on from its checkpoint."""
    return workflow.resume(form.workflow_run_id, options, resources, resolved=resolved_for(form))
