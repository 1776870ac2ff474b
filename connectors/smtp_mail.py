"""Mail through the operator's SMTP server (the settings file's `email` section):
how a human-input form reaches a recipient by email.

One message per call, over one connection that is closed when it is sent;
every network step is bounded by the server's `timeout_s`. Headers come from
workflow text, so CR and LF are taken out of the subject and each address is
checked before anything is sent: a recipient list cannot be smuggled into a
header. The password is read from the environment by the caller and never
appears in an error (smtplib's own texts are dropped; the error names the
host and what failed).

Its settings are the settings file's `email` section (`EmailSettings`):

    email:
      smtp_host: smtp.example.com     # none: a human-input node that mails is refused at load
      smtp_port: 587
      security: starttls              # none | starttls | ssl
      username: robot@example.com
      password_env: SMTP_PASSWORD     # the password is read from this variable, never the file
      sender: "Review robot <robot@example.com>"
      timeout_s: 10                   # connect, and each command after it
      form_url: https://forms.example.com/form/   # the link in the mail: form_url + token

Without `form_url` the mail carries the form's token for `firstgate resume`.
"""

from __future__ import annotations

import re
import smtplib
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import make_msgid
from typing import Annotated, Literal

from firstgate.common.dsl import SettingsModel, between
from firstgate.connectors.errors import ConnectorError
from pydantic import Field

# An address as the form sends to it: one `@`, no spaces, quotes or angle brackets.
_ADDRESS = re.compile(r"^[^@\s<>\"',;:()\[\]\\]{1,64}@[A-Za-z0-9.-]{1,253}$")
MAX_RECIPIENTS = 100
MAX_SUBJECT_CHARS = 200


class EmailSettings(SettingsModel):
    smtp_host: str | None = None
    smtp_port: Annotated[int, between(1, 65535)] = 587
    security: Literal["none", "starttls", "ssl"] = "starttls"
    username: str | None = None
    password_env: str | None = None
    sender: str = Field(default="firstgate@localhost", min_length=3)
    timeout_s: Annotated[int, between(1, 300)] = 10
    form_url: str | None = None


class MailError(ConnectorError):
    message_key = "errors.email.failed"


@dataclass(frozen=True, slots=True)
class MailServer:
    host: str
    port: int
    security: str  # none | starttls | ssl
    sender: str
    timeout_s: float
    username: str | None = None
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Mail:
    recipients: tuple[str, ...]
    subject: str
    text: str
    html: str | None = None


def check_address(address: str) -> str:
    """The address, or a MailError naming it (quoted, cut) when it cannot be a recipient."""
    if not _ADDRESS.match(address) or len(address) > 254:
        raise MailError("errors.email.badAddress", address=address[:80])
    return address


def one_line(text: str, limit: int = MAX_SUBJECT_CHARS) -> str:
    """A header's text: line breaks and other control characters become spaces."""
    flat = "".join(" " if ord(ch) < 32 or ord(ch) == 127 else ch for ch in text)
    return " ".join(flat.split())[:limit]


def build_message(server: MailServer, mail: Mail) -> EmailMessage:
    recipients = [check_address(a) for a in mail.recipients]
    if not recipients:
        raise MailError("errors.email.noRecipients")
    if len(recipients) > MAX_RECIPIENTS:
        raise MailError("errors.email.tooManyRecipients", count=len(recipients), max=MAX_RECIPIENTS)
    message = EmailMessage()
    message["From"] = one_line(server.sender, 320)
    message["To"] = ", ".join(recipients)
    message["Subject"] = one_line(mail.subject)
    message["Message-ID"] = make_msgid(domain="firstgate.local")
    message.set_content(mail.text)
    if mail.html is not None:
        message.add_alternative(mail.html, subtype="html")
    return message


def send_mail(server: MailServer, mail: Mail) -> None:
    """Send one message, or raise MailError (connect, TLS, login, refusal)."""
    message = build_message(server, mail)
    step = "connect"
    try:
        client: smtplib.SMTP
        if server.security == "ssl":
            client = smtplib.SMTP_SSL(
                server.host,
                server.port,
                timeout=server.timeout_s,
                context=ssl.create_default_context(),
            )
        else:
            client = smtplib.SMTP(server.host, server.port, timeout=server.timeout_s)
        with client:
            if server.security == "starttls":
                step = "starttls"
                client.starttls(context=ssl.create_default_context())
            if server.username:
                step = "login"
                client.login(server.username, server.password or "")
            step = "send"
            refused = client.send_message(message)
        if refused:
            raise MailError("errors.email.refused", host=server.host, count=len(refused))
    except MailError:
        raise
    except (TimeoutError, smtplib.SMTPException, OSError, ssl.SSLError) as exc:
        # smtplib's texts may echo what was sent: only the step and the class go out.
        raise MailError(
            "errors.email.sendFailed", host=server.host, step=step, reason=type(exc).__name__
        ) from None


def recipients_of(addresses: Sequence[str]) -> tuple[str, ...]:
    """Distinct addresses in their first order."""
    return tuple(dict.fromkeys(a.strip() for a in addresses if a.strip()))
