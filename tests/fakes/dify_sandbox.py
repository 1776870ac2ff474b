"""A real-socket fake of the dify-sandbox service (`POST /v1/sandbox/run`).

It checks the API key as the service does (401 without the right
`X-Api-Key`), runs the posted script for real (`python3` for "python3",
`node` for "nodejs", each in a subprocess with a timeout), and answers with
the service's envelope: {"code": 0, "message": "success", "data": {"stdout",
"stderr", "error", "exit_code"}}. A test can instead make it answer a fixed
status, a fixed envelope, or nothing for a while. Every request is recorded.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RUNNERS = {
    "python3": [sys.executable, "-I", "-c"],
    "nodejs": [shutil.which("node") or "node", "-e"],
}


@dataclass
class Behaviour:
    status: int = 200
    envelope: dict[str, Any] | None = None  # answer this instead of running the code
    delay_s: float = 0.0
    timeout_s: float = 5.0  # the service's worker timeout
    network_enabled: bool = True  # like the service's enable_network setting


@dataclass
class FakeDifySandbox:
    api_key: str = "dify-sandbox"
    behaviour: Behaviour = field(default_factory=Behaviour)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                status, payload = fake.answer(self.path, self.headers.get("X-Api-Key"), body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, path: str, key: str | None, body: dict[str, Any]) -> tuple[int, Any]:
        behaviour = self.behaviour
        if behaviour.delay_s:
            time.sleep(behaviour.delay_s)
        if path != "/v1/sandbox/run":
            return 404, {"code": -404, "message": "not found"}
        if key != self.api_key:
            return 401, {"code": -401, "message": "unauthorized"}
        if behaviour.status != 200:
            return behaviour.status, {"code": -behaviour.status, "message": "Too many requests"}
        if behaviour.envelope is not None:
            return 200, behaviour.envelope
        if body.get("enable_network") and not behaviour.network_enabled:
            return 200, {
                "code": -400,
                "message": "network is disabled, please enable it in the configuration",
            }
        runner = RUNNERS.get(body.get("language", ""))
        if runner is None:
            return 400, {"code": -400, "message": "unsupported language"}
        return 200, {"code": 0, "message": "success", "data": self._run(runner, body["code"])}

    def _run(self, runner: list[str], code: str) -> dict[str, Any]:
        try:
            done = subprocess.run(
                [*runner, code], capture_output=True, text=True, timeout=self.behaviour.timeout_s
            )
        except subprocess.TimeoutExpired:
            return {"stdout": "", "stderr": "", "error": "error: timeout\n", "exit_code": -1}
        error = (
            ""
            if done.returncode == 0
            else f"process exited with code {done.returncode}\n{done.stderr}"
        )
        return {
            "stdout": done.stdout,
            "stderr": done.stderr,
            "error": error,
            "exit_code": done.returncode,
        }
