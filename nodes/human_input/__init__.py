"""Dify's `human-input` node: the run pauses at it until a person answers a form.

The node's data is Dify's: `form_content` (Markdown with `{{#node.var#}}`
variables and `{{#$output.name#}}` places for the inputs), `inputs`
(`paragraph`, `select`, `file`, `file-list`), `user_actions` (each action's
id is a branch handle), `timeout` + `timeout_unit` (the `__timeout` branch
when nobody answers in time) and `delivery_methods` (`webapp`: the form's
token goes out in `human_input_required`; `email`: a link or the token is
mailed through the settings' SMTP server).

Running it opens the form (`form.py`: the content rendered, the defaults and
options resolved, a token, the deadline), keeps it in the run's store
(`ctx.connectors.forms`), mails it, and pauses the run (`NodeResult.pause`).
It never waits: whoever answers the form (serve's form endpoints, `firstgate
resume`, the deadline sweeper) resumes the run with the node's outputs and
the chosen handle (`form.answer_outputs`, `form.timeout_outputs`).
"""

from __future__ import annotations

import time
from typing import Any

from firstgate.common.files import FileRules
from firstgate.nodes.base import Needs, NodeContext, NodeResult, NodeRunError, Pause, Role
from firstgate.nodes.human_input import delivery, form
from firstgate.nodes.human_input.model import Data, EmailConfig, FormInput, UserAction
from firstgate.nodes.selectors import Selector, template_selectors
from firstgate.nodes.spec import NodeSpec

__all__ = ["SPEC", "Data", "EmailConfig", "FormInput", "UserAction", "upload_rules"]


def upload_rules(data: Data, upload_config: Any = None) -> list[FileRules]:
    """The rules under which this node's form takes files (an upload made for the
    form is checked against them)."""
    return [
        FileRules.from_config(
            item.allowed_file_types,
            item.allowed_file_extensions,
            item.allowed_file_upload_methods,
            upload_config,
        )
        for item in data.inputs
        if item.type in ("file", "file-list")
    ]


def handles(data: Data) -> set[str]:
    return {a.id for a in data.user_actions} | {form.TIMEOUT_HANDLE}


def selectors(data: Data) -> list[Selector]:
    found = list(template_selectors(data.form_content))
    for item in data.inputs:
        for source in (item.default_source, item.option_source):
            if source is not None and source.variable is not None:
                found.append(source.variable)
    for method in data.enabled_methods:
        if method.type == "email":
            config = data.email_config(method)
            found.extend(template_selectors(config.subject))
            found.extend(template_selectors(config.body))
    return found


def output_names(data: Data) -> set[str]:
    return {i.output_variable_name for i in data.inputs} | set(form.RESERVED_OUTPUTS)


def run(data: Data, ctx: NodeContext) -> NodeResult:
    forms = getattr(ctx.connectors, "forms", None)
    if forms is None:
        raise NodeRunError("errors.humanInput.noStore")
    opened = form.open_form(data, ctx.variables, node_id=ctx.node_id, now=time.time())
    forms.add_form(form.record_of(opened, ctx.variables))
    delivery.deliver(data, opened, ctx)
    return NodeResult(
        inputs={},
        pause=Pause(
            node_id=ctx.node_id,
            payload=opened.definition,
            reason=form.pause_reason(opened.definition),
            events=(form.required_notice(opened.definition),),
        ),
    )


SPEC = NodeSpec(
    type="human-input",
    role=Role.BRANCH,
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=False,
    handles=handles,
    needs=lambda data: Needs(),
)
