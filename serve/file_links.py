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
from urllib.parse import urlencode

FILES_ACCESS_TIMEOUT_S = 300


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
        if not (timestamp.isdigit() and nonce and sign):
            return False
        if time.time() - int(timestamp) > self.ttl:
            return False
        return hmac.compare_digest(self._sign(upload_id, timestamp, nonce), sign)
