"""The human-input node's DSL model as Dify's editor writes it, and its
load-time checks (delivery methods this runtime can make)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from firstgate.common.dsl import DslModel, between, dsl_error, note_warning, shown
from firstgate.common.sections import context_sections
from firstgate.connectors.smtp_mail import EmailSettings, check_address, recipients_of
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.selectors import Selector
from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

TIMEOUT_HANDLE = "__timeout"
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
        if value == TIMEOUT_HANDLE:
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
                check_email_method(self.email_config(method), info)
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


def external_addresses(config: EmailConfig) -> tuple[str, ...]:
    return recipients_of([r.email for r in config.recipients.items if r.type == "external"])


def check_email_method(config: EmailConfig, info: ValidationInfo) -> None:
    """Refuse, at load, an email delivery this runtime cannot make."""
    section = context_sections(info).find(EmailSettings)
    if section is None or not section.smtp_host:
        raise dsl_error(
            "dsl.humanInput.emailNeedsSmtp",
            "this form is delivered by email, and the runtime settings name no SMTP server: "
            "set email.smtp_host (or turn the email delivery off)",
        )
    members = [r for r in config.recipients.items if r.type == "member"]
    if members or config.recipients.whole_workspace:
        note_warning(info.context, "dsl.warning.humanInputMembers", count=len(members))
    addresses = external_addresses(config)
    if not addresses:
        raise dsl_error(
            "dsl.humanInput.noRecipients",
            "this form is delivered by email but names no email address to send it to",
        )
    for address in addresses:
        try:
            check_address(address)
        except Exception:
            raise dsl_error(
                "dsl.humanInput.badAddress",
                "{address} is not an email address",
                address=address[:80],
            ) from None
