"""The one redaction rule (`common/redaction.py`): a URL never shows its
password, whichever door it came through."""

from __future__ import annotations

import pytest
from firstgate.common.redaction import MASK, Redactor, redact_url, safe_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pw@example.com:8443/a/b?key=s3cret#x", "https://example.com:8443/a/b"),
        ("http://example.com/path", "http://example.com/path"),
        ("http://[::1]:8080/x?q=1", "http://[::1]:8080/x"),
        ("http://user@example.com:bad/x", "http://example.com/x"),
        ("http://[::1/x", "(invalid URL)"),
    ],
)
def test_a_workflow_url_is_shown_without_credentials_or_query(url: str, shown: str) -> None:
    assert safe_url(url) == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/firstgate", f"postgresql://app:{MASK}@db:5432/firstgate"),
        ("redis://:s3cret@broker:6379/0?ssl=1", f"redis://:{MASK}@broker:6379/0?ssl=1"),
        ("postgresql://app:s3cret@[fd00::2]:5432/db", f"postgresql://app:{MASK}@[fd00::2]:5432/db"),
        ("postgresql://app@db/firstgate", "postgresql://app@db/firstgate"),
        ("postgresql://app:s3cret@[fd00::2/db", "(invalid URL)"),
    ],
)
def test_an_operator_url_keeps_everything_but_the_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3cret" not in redact_url(url)


def test_a_key_is_removed_in_every_echoed_form() -> None:
    key = "sk-a/b+c"
    redactor = Redactor([key])
    for form in (key, "sk-a%2Fb%2Bc", "sk-a/b%2Bc", "sk-a%2fb%2bc", "sk-a\\/b+c"):
        assert redactor.redact(f"echo {form} end") == f"echo {MASK} end", form


def test_a_route_url_masks_the_whole_userinfo() -> None:
    # A key may travel as the user name: nothing of `user:password@` is shown.
    assert redact_url("https://sk-key@h.example/v1", user=False) == f"https://{MASK}@h.example/v1"
    assert (
        redact_url("https://u:pw@h.example:8443/v1", user=False)
        == f"https://{MASK}@h.example:8443/v1"
    )
    assert redact_url("https://h.example/v1", user=False) == "https://h.example/v1"
