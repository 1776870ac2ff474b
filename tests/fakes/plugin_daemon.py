"""A fake Dify plugin daemon's tool dispatch on a real loopback socket.

`POST /plugin/{tenant}/dispatch/tool/invoke` answers with SSE lines
`data: {"code": 0, "message": "", "data": <tool message>}`; what it sends is
chosen by the tool name (an agent strategy's dispatch: see `_agent`):

- `echo`: one text message with the `text` parameter;
- `everything`: text, a link, a JSON object, an image URL, a blob, a blob in
  three chunks, a variable and a streamed variable;
- `slow`: `count` text messages, `gap` seconds apart;
- `hang`: headers, then silence until the client goes away;
- `refuse`: an error envelope (PluginInvokeError wrapping a ToolInvokeError);
- `status`: answers `code` (a JSON error body in the daemon's shape);
- `flood`: text messages without end;
- `garbage`: a line that is not JSON;
- `cut_blob`: the first of two blob chunks, then a clean close;
- `search`: a text line and a JSON object about the `query` parameter.

Every request is recorded (path, headers, body) for the tests to inspect.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.serving import Serving, read_json, send_json

PIXEL = b"\x89PNG\r\n\x1a\n" + b"fake-png-body"


def _frame(message: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps({"code": 0, "message": "", "data": message}).encode() + b"\n\n"


def _text(value: str) -> dict[str, Any]:
    return {"type": "text", "message": {"text": value}, "meta": None}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def everything() -> list[dict[str, Any]]:
    blob = b"%PDF-1.4 chunked body of a file"
    parts = [blob[:10], blob[10:20], blob[20:]]
    chunks = [
        {
            "type": "blob_chunk",
            "message": {
                "id": "b1",
                "sequence": i,
                "total_length": len(blob),
                "blob": _b64(part),
                "end": i == len(parts) - 1,
            },
            "meta": {"mime_type": "application/pdf", "filename": "report.pdf"},
        }
        for i, part in enumerate(parts)
    ]
    return [
        _text("Hello "),
        _text("world"),
        {"type": "link", "message": {"text": "https://example.com/page"}},
        {"type": "json", "message": {"json_object": {"answer": 42}}},
        {"type": "image", "message": {"text": "https://example.com/cat.png"}},
        {"type": "blob", "message": {"blob": _b64(PIXEL)}, "meta": {"mime_type": "image/png"}},
        *chunks,
        {"type": "variable", "message": {"variable_name": "score", "variable_value": 0.5}},
        {
            "type": "variable",
            "message": {"variable_name": "story", "variable_value": "once ", "stream": True},
        },
        {
            "type": "variable",
            "message": {"variable_name": "story", "variable_value": "upon", "stream": True},
        },
        {"type": "log", "message": {"id": "l", "label": "x", "status": "start", "data": {}}},
    ]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        return None

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        body = read_json(self)
        if self.path.endswith("/dispatch/agent_strategy/invoke"):
            return self._agent(body["data"])
        if not self.path.endswith("/dispatch/tool/invoke"):
            return send_json(self, 404, {"code": -404, "message": "not found", "data": None})
        data = body["data"]
        params = data["tool_parameters"]
        tool = data["tool"]
        if tool == "status":
            inner = json.dumps({"error_type": "PluginDaemonUnauthorizedError", "message": "no"})
            return send_json(
                self, int(params["code"]), {"code": -1, "message": inner, "data": None}
            )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self._answer(tool, params)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _agent(self, data: dict[str, Any]) -> None:
        """An agent strategy plugin: `think` reports one step (a `log` message
        at its start and its end) and answers with the query; `refuse` fails."""
        params = data["agent_strategy_params"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        out = self.wfile
        if data["agent_strategy"] == "refuse":
            inner = {"error_type": "AgentInvokeError", "message": "the strategy gave up"}
            envelope = {"code": -500, "message": json.dumps(inner), "data": None}
            out.write(b"data: " + json.dumps(envelope).encode() + b"\n\n")
        else:
            step = {"id": "s1", "label": "ROUND 1", "parent_id": None, "error": None}
            out.write(_frame({"type": "log", "message": {**step, "status": "start", "data": {}}}))
            done = {**step, "status": "success", "data": {"thought": "easy"}, "metadata": {}}
            out.write(_frame({"type": "log", "message": done}))
            out.write(_frame(_text(f"Answer to {params.get('query')}")))
            out.write(_frame({"type": "json", "message": {"json_object": {"rounds": 1}}}))
        out.flush()

    def _answer(self, tool: str, params: dict[str, Any]) -> None:
        out = self.wfile
        if tool == "echo":
            out.write(_frame(_text(str(params.get("text")))))
        elif tool == "everything":
            for message in everything():
                out.write(_frame(message))
        elif tool == "slow":
            for i in range(int(params.get("count", 3))):
                out.write(_frame(_text(f"{i};")))
                out.flush()
                time.sleep(float(params.get("gap", 0.5)))
        elif tool == "hang":
            out.flush()
            self.server.stop.wait(60)
        elif tool == "refuse":
            inner = {"error_type": "ToolInvokeError", "message": "the tool said no"}
            outer = {"error_type": "PluginInvokeError", "message": json.dumps(inner)}
            envelope = {"code": -500, "message": json.dumps(outer), "data": None}
            out.write(b"data: " + json.dumps(envelope).encode() + b"\n\n")
        elif tool == "flood":
            line = _frame(_text("x" * 4096))
            while not self.server.stop.is_set():
                out.write(line)
        elif tool == "garbage":
            out.write(b"data: this is not json\n\n")
        elif tool == "search":
            query = str(params.get("query", ""))
            found = {"query": query, "results": [{"title": f"About {query}", "score": 0.9}]}
            out.write(_frame(_text(f"1 result for {query}")))
            out.write(_frame({"type": "json", "message": {"json_object": found}}))
        elif tool == "cut_blob":
            first = {
                "type": "blob_chunk",
                "message": {
                    "id": "c",
                    "sequence": 0,
                    "total_length": 10,
                    "blob": _b64(b"12345"),
                    "end": False,
                },
            }
            out.write(_frame(first))
        out.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.stop = threading.Event()


class FakePluginDaemon(Serving):
    def __init__(self) -> None:
        self._server = _Server()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._server.requests
