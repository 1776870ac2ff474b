"""How a human-input form reaches people besides its token: by email.

At load, a node that mails is refused unless the runtime settings name an
SMTP server (`email.smtp_host`), and unless it has an address to mail to
(Dify's workspace members have no address here: they are left out, with a
warning). When the node runs, each enabled email method sends one message
through `connectors/smtp_mail.py`: its subject and body with the run's
variables, and `{{#url#}}` replaced by the form's link (`email.form_url` +
token), or by the token when no link is configured (it is appended when the
body has no `{{#url#}}`). The body goes as plain text.
"""

from __future__ import annotations

from firstgate.connectors.smtp_mail import EmailSettings, Mail, send_mail
from firstgate.nodes.base import NodeContext
from firstgate.nodes.human_input.form import OpenedForm
from firstgate.nodes.human_input.model import Data, external_addresses
from firstgate.nodes.values import render_text

URL_PLACE = "{{#url#}}"


def form_link(ctx: NodeContext, token: str) -> str:
    base = ctx.connectors.sections.get(EmailSettings).form_url if ctx.connectors else None
    return f"{base}{token}" if base else token


def deliver(data: Data, opened: OpenedForm, ctx: NodeContext) -> None:
    """Mail the form to each enabled email method's recipients (MailError on failure)."""
    for method in data.enabled_methods:
        if method.type != "email" or ctx.connectors is None:
            continue
        config = data.email_config(method)
        link = form_link(ctx, opened.token)
        body = config.body or ""
        if URL_PLACE not in body:
            body = f"{body}\n\n{URL_PLACE}" if body else URL_PLACE
        text = render_text(body.replace(URL_PLACE, link), ctx.variables)
        subject = render_text(config.subject or data.title or "Form", ctx.variables)
        send_mail(ctx.connectors.mail_server(), Mail(external_addresses(config), subject, text))
