"""Signed links to uploaded files: what a run's file `url` is when served.

A link is `/files/<id>/file-preview?timestamp&nonce&sign` (Dify's shape), the
sign an HMAC-SHA256 of the id, time and nonce with the server's secret
(`FIRSTGATE_FILES_SECRET`, else random per process), valid for `ttl` seconds
(Dify's FILES_ACCESS_TIMEOUT, 300). Anyone holding a fresh link may fetch the
file; nothing else about the server's files is reachable."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from urllib.parse import urlencode, urlsplit

FILES_ACCESS_TIMEOUT_S = 300

# Types a browser shows without running anything of the file's: served inline.
# Everything else (HTML, SVG, XML, JavaScript, anything unknown) is served as an
# attachment, and every file under a sandboxing CSP, so an uploaded page or
# image never runs script on the origin where API keys are typed.
INLINE_TYPES = frozenset(
    {
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "image/bmp",
        "application/pdf",
        "text/plain",
        "text/csv",
        "text/markdown",
        "audio/mpeg",
        "audio/wav",
        "audio/ogg",
        "video/mp4",
        "video/webm",
    }
)


def preview_headers(mime_type: str) -> dict[str, str]:
    """The headers a served file goes out with."""
    kind = mime_type.split(";", 1)[0].strip().lower()
    return {
        "Content-Disposition": "inline" if kind in INLINE_TYPES else "attachment",
        "Content-Security-Policy": "sandbox; default-src 'none'; img-src 'self'; media-src 'self'",
        "X-Content-Type-Options": "nosniff",
    }


class FilesUrlError(ValueError):
    """A files URL that is not a plain http(s) origin (with an optional path)."""


def files_base_url(configured: str | None, host: str, port: int) -> str:
    """Where links point: the configured URL (Dify's FILES_URL), else the address
    the server listens on (a wildcard address as loopback). Never a request's
    `Host` header, which the client chooses."""
    if configured:
        parts = urlsplit(configured)
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.username
            or parts.password
            or parts.query
            or parts.fragment
        ):
            raise FilesUrlError(configured)
        return configured.rstrip("/")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class FileLinks:
    def __init__(self, secret: bytes | None = None, ttl: float = FILES_ACCESS_TIMEOUT_S) -> None:
        configured = os.environ.get("FIRSTGATE_FILES_SECRET", "").encode()
        self._secret = secret or configured or secrets.token_bytes(32)
        self.ttl = ttl

    def _sign(self, upload_id: str, timestamp: str, nonce: str) -> str:
        message = f"file-preview|{upload_id}|{timestamp}|{nonce}".encode()
        digest = hmac.new(self._secret, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode()

    def link(self, base_url: str, upload_id: str) -> str:
        timestamp = str(int(time.time()))
        nonce = secrets.token_hex(16)
        query = urlencode(
            {
                "timestamp": timestamp,
                "nonce": nonce,
                "sign": self._sign(upload_id, timestamp, nonce),
            }
        )
        return f"{base_url.rstrip('/')}/files/{upload_id}/file-preview?{query}"

    def valid(self, upload_id: str, timestamp: str, nonce: str, sign: str) -> bool:
        # ASCII only: `²` passes isdigit but not int(), a non-ASCII sign fails
        # compare_digest; a second-count longer than 12 digits is no link of ours.
        if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
            return False
        if not (nonce and sign and sign.isascii()):
            return False
        if time.time() - int(timestamp) > self.ttl:
            return False
        return hmac.compare_digest(self._sign(upload_id, timestamp, nonce), sign)
