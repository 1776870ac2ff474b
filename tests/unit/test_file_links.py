"""How served files go out: active types (HTML, SVG, anything unknown) as
attachments under a sandboxing CSP, passive ones inline; and where links point
(a configured files URL, else the served address, never a request's Host)."""

from __future__ import annotations

import pytest
from firstgate.serve.file_links import FilesUrlError, files_base_url, preview_headers


@pytest.mark.parametrize(
    "mime", ["text/html", "image/svg+xml", "application/xhtml+xml", "text/xml", "", "x/unknown"]
)
def test_active_types_are_attachments(mime: str) -> None:
    headers = preview_headers(mime)
    assert headers["Content-Disposition"] == "attachment"
    assert headers["Content-Security-Policy"].startswith("sandbox")
    assert headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("mime", ["image/png", "application/pdf", "text/plain; charset=utf-8"])
def test_passive_types_are_inline_and_still_sandboxed(mime: str) -> None:
    headers = preview_headers(mime)
    assert headers["Content-Disposition"] == "inline"
    assert headers["Content-Security-Policy"].startswith("sandbox")


def test_links_point_to_the_configured_url_else_the_served_address() -> None:
    assert files_base_url("https://files.example/api/", "0.0.0.0", 5001) == (
        "https://files.example/api"
    )
    assert files_base_url(None, "127.0.0.1", 5001) == "http://127.0.0.1:5001"
    assert files_base_url(None, "0.0.0.0", 80) == "http://127.0.0.1:80"
    assert files_base_url("", "::", 5001) == "http://[::1]:5001"


@pytest.mark.parametrize(
    "url",
    ["ftp://files.example", "https://user:pw@files.example", "https://f.example/?a=1", "files"],
)
def test_a_files_url_that_is_not_an_origin_is_refused(url: str) -> None:
    with pytest.raises(FilesUrlError):
        files_base_url(url, "127.0.0.1", 5001)
