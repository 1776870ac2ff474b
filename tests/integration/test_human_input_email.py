"""A human-input form mailed through a real SMTP server (aiosmtpd on loopback):
the message's recipients, subject and body (variables, the form's link), and
what the connector refuses (header injection, a bad address, a server that
is not there, a login the server refuses) without printing the password."""

from __future__ import annotations

import email
import socket
from collections.abc import Iterator
from email.message import Message
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from firstgate.common.cancel import CancelToken
from firstgate.common.sections import Sections, validation_context
from firstgate.connectors.hub import Connectors
from firstgate.connectors.smtp_mail import EmailSettings, Mail, MailError, MailServer, send_mail
from firstgate.nodes.base import NodeContext
from firstgate.nodes.human_input import Data, delivery
from firstgate.nodes.human_input import form as forms
from firstgate.runtime.settings import RuntimeSettings


class Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], Message]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        self.messages.append((list(envelope.rcpt_tos), email.message_from_bytes(envelope.content)))
        return "250 OK"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    port = _free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()


def _server(port: int, **extra: Any) -> MailServer:
    return MailServer(
        host="127.0.0.1",
        port=port,
        security="none",
        sender="robot@example.com",
        timeout_s=5,
        **extra,
    )


def _data(**config: Any) -> Data:
    return Data.model_validate(
        {
            "type": "human-input",
            "title": "Review",
            "form_content": "Check {{#draft.output#}}",
            "user_actions": [{"id": "ok", "title": "OK"}],
            "delivery_methods": [
                {
                    "type": "email",
                    "enabled": True,
                    "config": {
                        "recipients": {"items": [{"type": "external", "email": "ann@example.com"}]},
                        "subject": "Review {{#draft.output#}}",
                        "body": "Hello,\n\nthe draft: {{#draft.output#}}\nOpen {{#url#}}\n",
                        **config,
                    },
                }
            ],
        },
        context=validation_context(
            Sections(RuntimeSettings(email=EmailSettings(smtp_host="127.0.0.1")))
        ),
    )


class Pool:
    def get(self, selector: tuple[str, ...]) -> Any:
        return {("draft", "output"): "a note\r\nBcc: eve@example.com"}.get(tuple(selector))


def test_the_form_is_mailed_with_its_link_and_the_run_s_values(smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    settings = RuntimeSettings(
        email=EmailSettings(
            smtp_host="127.0.0.1", smtp_port=port, security="none",
            sender="Review robot <robot@example.com>", form_url="https://forms.example.com/form/",
        )
    )  # fmt: skip
    data = _data()
    opened = forms.open_form(data, Pool(), node_id="review", now=1_000.0)
    ctx = NodeContext(
        node_id="review", attempt=1, variables=Pool(), cancel=CancelToken(),
        connectors=Connectors.from_settings(settings),
    )  # fmt: skip
    delivery.deliver(data, opened, ctx)
    ((recipients, message),) = inbox.messages
    assert recipients == ["ann@example.com"]  # the Bcc in the variable went nowhere
    assert message["To"] == "ann@example.com" and message["Bcc"] is None
    assert message["Subject"] == "Review a note Bcc: eve@example.com"
    body = message.get_payload(decode=True).decode()
    assert f"Open https://forms.example.com/form/{opened.token}" in body
    assert "the draft: a note" in body


def test_without_a_link_the_token_is_mailed(smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    settings = RuntimeSettings(
        email=EmailSettings(smtp_host="127.0.0.1", smtp_port=port, security="none")
    )
    data = _data(body="No placeholder here.")
    opened = forms.open_form(data, Pool(), node_id="review", now=1_000.0)
    ctx = NodeContext(
        node_id="review", attempt=1, variables=Pool(), cancel=CancelToken(),
        connectors=Connectors.from_settings(settings),
    )  # fmt: skip
    delivery.deliver(data, opened, ctx)
    ((_, message),) = inbox.messages
    body = message.get_payload(decode=True).decode()
    assert body.startswith("No placeholder here.") and opened.token in body


def test_a_bad_address_is_refused_before_anything_is_sent(smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    for address in ("ann@example.com\r\nRCPT TO:<eve@example.com>", "not an address", "a@b>c"):
        with pytest.raises(MailError) as caught:
            send_mail(_server(port), Mail((address,), "s", "t"))
        assert caught.value.message_key == "errors.email.badAddress"
    assert inbox.messages == []


def test_a_server_that_is_not_there_is_a_mail_error_naming_host_and_step() -> None:
    with pytest.raises(MailError) as caught:
        send_mail(_server(_free_port()), Mail(("ann@example.com",), "s", "t"))
    assert caught.value.message_key == "errors.email.sendFailed"
    assert caught.value.params["step"] == "connect" and "127.0.0.1" in str(caught.value)


def _refuse_all(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
    assert isinstance(data, LoginPassword)
    return AuthResult(success=False, handled=False)


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_a_refused_login_never_shows_the_password() -> None:
    port = _free_port()
    controller = Controller(
        Inbox(), hostname="127.0.0.1", port=port, authenticator=_refuse_all,
        auth_require_tls=False, auth_required=True,
    )  # fmt: skip
    controller.start()
    try:
        with pytest.raises(MailError) as caught:
            send_mail(
                _server(port, username="robot", password="s3cret-pass"),
                Mail(("ann@example.com",), "s", "t"),
            )
    finally:
        controller.stop()
    assert caught.value.params["step"] == "login"
    assert "s3cret-pass" not in str(caught.value) and caught.value.__cause__ is None
