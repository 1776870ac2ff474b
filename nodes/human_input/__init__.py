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
from typing import Annotated, Any, Literal

from firstgate.common.dsl import DslModel, between, dsl_error, shown
from firstgate.common.files import FileRules
from firstgate.nodes.base import Needs, NodeContext, NodeResult, NodeRunError, Pause, Role
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.human_input import delivery, form
from firstgate.nodes.selectors import Selector, template_selectors
from firstgate.nodes.spec import NodeSpec
from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

ACTION_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _selector_or_empty(value: Any) -> Any:
    return [] if value is None else value


class ValueSource(DslModel):
    """A paragraph's default or a select's options: a constant, or a variable."""

    type: Literal["constant", "variable", "const"] = "constant"
    selector: Annotated[list[str], BeforeValidator(_selector_or_empty)] = Field(
        default_factory=list
    )
    value: Any = ""

    @model_validator(mode="after")
    def _needs_selector(self) -> ValueSource:
        if self.type == "variable" and (
            len(self.selector) < 2 or not all(isinstance(p, str) and p for p in self.selector)
        ):
            raise dsl_error(
                "dsl.selector",
                "must be a variable selector like [node_id, variable], got {got}",
                got=shown(self.selector),
            )
        return self

    @property
    def variable(self) -> Selector | None:
        return tuple(self.selector) if self.type == "variable" else None


InputType = Literal["paragraph", "text-input", "select", "file", "file-list"]


class FormInput(DslModel):
    type: InputType
    output_variable_name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,29}$")
    default: ValueSource | None = None
    # Older exports call a text input's default its placeholder.
    placeholder: ValueSource | None = None
    option_source: ValueSource | None = None
    allowed_file_types: list[str] = Field(default_factory=list)
    allowed_file_extensions: list[str] = Field(default_factory=list)
    allowed_file_upload_methods: list[str] = Field(
        default_factory=lambda: ["local_file", "remote_url"]
    )
    number_limits: Annotated[int, between(1, 100)] = 5

    @model_validator(mode="after")
    def _select_has_options(self) -> FormInput:
        if self.type == "select":
            source = self.option_source
            if source is None or (source.type != "variable" and not _options(source.value)):
                raise dsl_error(
                    "dsl.humanInput.noOptions",
                    "the select input {name} has no options",
                    name=self.output_variable_name,
                )
        return self

    @property
    def default_source(self) -> ValueSource | None:
        return self.default or self.placeholder


def _options(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


class UserAction(DslModel):
    id: str = Field(pattern=ACTION_ID_PATTERN, max_length=50)
    title: str = Field(min_length=1, max_length=100)
    button_style: Literal["primary", "default", "accent", "ghost"] = "default"

    @field_validator("id")
    @classmethod
    def _not_timeout(cls, value: str) -> str:
        if value == form.TIMEOUT_HANDLE:
            raise dsl_error(
                "dsl.humanInput.reservedAction",
                "{id} is the timeout branch's handle, not an action id",
                id=value,
            )
        return value


class Recipient(DslModel):
    type: Literal["member", "external"] = "external"
    email: str = ""
    user_id: str = ""


class Recipients(DslModel):
    whole_workspace: bool = False
    items: list[Recipient] = Field(default_factory=list)


class EmailConfig(DslModel):
    recipients: Recipients = Field(default_factory=Recipients)
    subject: str = ""
    body: str = ""
    debug: bool = False


class DeliveryMethod(DslModel):
    type: str
    enabled: bool = True
    id: str = ""
    config: EmailConfig | dict[str, Any] | None = None


class Data(BaseNodeData):
    delivery_methods: list[DeliveryMethod] = Field(default_factory=list)
    form_content: str = ""
    inputs: list[FormInput] = Field(default_factory=list)
    user_actions: list[UserAction] = Field(min_length=1)
    timeout: Annotated[int, between(1, 100_000)] = 36
    timeout_unit: Literal["hour", "day"] = "hour"

    @model_validator(mode="after")
    def _distinct(self) -> Data:
        for what, names in (
            ("inputs", [i.output_variable_name for i in self.inputs]),
            ("user_actions", [a.id for a in self.user_actions]),
        ):
            seen: set[str] = set()
            for name in names:
                if name in seen:
                    raise dsl_error(
                        "dsl.humanInput.duplicate",
                        "two {what}s are named {name}",
                        what=what,
                        name=name,
                    )
                seen.add(name)
        return self

    @model_validator(mode="after")
    def _delivery_runs_here(self, info: ValidationInfo) -> Data:
        for method in self.enabled_methods:
            if method.type not in ("webapp", "email"):
                raise dsl_error(
                    "dsl.humanInput.unsupportedDelivery",
                    "the delivery method {method} is not available here (webapp and email are)",
                    method=method.type,
                )
            if method.type == "email":
                delivery.check_email_method(self.email_config(method), info.context)
        return self

    @property
    def enabled_methods(self) -> list[DeliveryMethod]:
        return [m for m in self.delivery_methods if m.enabled]

    @property
    def webapp(self) -> bool:
        """Whether the form goes out with a token (no methods at all: as webapp)."""
        methods = self.enabled_methods
        return not self.delivery_methods or any(m.type == "webapp" for m in methods)

    @staticmethod
    def email_config(method: DeliveryMethod) -> EmailConfig:
        config = method.config
        if isinstance(config, EmailConfig):
            return config
        return EmailConfig.model_validate(config or {})

    @property
    def timeout_s(self) -> float:
        return self.timeout * (3600.0 if self.timeout_unit == "hour" else 86400.0)


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
