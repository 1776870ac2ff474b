"""The `email` section: the SMTP server human-input forms are mailed through.

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

from typing import Annotated, Literal

from firstgate.common.dsl import DslModel, between
from pydantic import Field


class EmailSettings(DslModel):
    smtp_host: str | None = None
    smtp_port: Annotated[int, between(1, 65535)] = 587
    security: Literal["none", "starttls", "ssl"] = "starttls"
    username: str | None = None
    password_env: str | None = None
    sender: str = Field(default="firstgate@localhost", min_length=3)
    timeout_s: Annotated[int, between(1, 300)] = 10
    form_url: str | None = None
