"""A fake External Knowledge API service on a real loopback socket.

`POST /api/retrieval` answers from `documents` (word overlap as the score,
honouring `top_k`, `score_threshold` and a `metadata_condition` on `is`);
`status` forces an error answer in Dify's documented error shape.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.serving import Serving, read_json, send_json


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        return None

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        body = read_json(self)
        if self.server.pad_bytes:  # an answer far bigger than any real one
            record = {"content": "x" * self.server.pad_bytes, "score": 1.0, "title": "pad"}
            return self._send(200, {"records": [record]})
        if self.server.status != 200:
            answer = {"error_code": 1002, "error_msg": "Authorization failed"}
            return self._send(self.server.status, answer)
        if self.path != "/api/retrieval":
            return self._send(404, {"error_code": 2001, "error_msg": "no such knowledge"})
        words = set(body["query"].lower().split())
        setting = body["retrieval_setting"]
        condition = body.get("metadata_condition") or {}
        records = []
        for doc in self.server.documents:
            if any(
                c["comparison_operator"] == "is" and doc["metadata"].get(c["name"]) != c["value"]
                for c in condition.get("conditions", [])
            ):
                continue
            overlap = len(words & set(doc["content"].lower().split()))
            score = overlap / max(len(words), 1)
            if overlap and score >= setting["score_threshold"]:
                records.append({**doc, "score": score})
        records.sort(key=lambda r: r["score"], reverse=True)
        self._send(200, {"records": records[: setting["top_k"]]})

    def _send(self, status: int, doc: Any) -> None:
        send_json(self, status, doc)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.documents: list[dict[str, Any]] = []
        self.status = 200
        self.pad_bytes = 0


class KnowledgeApi(Serving):
    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self._server = _Server()
        self._server.documents = documents

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/api"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._server.requests

    def fail_with(self, status: int) -> None:
        self._server.status = status

    def pad_answer(self, size: int) -> None:
        self._server.pad_bytes = size
