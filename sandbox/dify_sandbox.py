"""A code executor that speaks the dify-sandbox HTTP API, for users who already
run that service.

    POST {base_url}/v1/sandbox/run
    X-Api-Key: <key>
    {"language": "python3" | "nodejs", "code": <runner>, "preload": "", "enable_network": <bool>}
    -> {"code": 0, "message": "success", "data": {"stdout": ..., "error": ..., ...}}

The service runs a script and returns its output; like Dify, the runner wraps
the user's code so that it reads base64-encoded JSON inputs, calls `main` and
prints the result between `<<RESULT>>` tags. Templates are rendered by a
Python runner with the service's Jinja2.

Requests go through `http.client` so that a cancel can shut the socket down
mid-request (the service answers only when the code is done). The reply is
read up to a size cap; connect and read have timeouts.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import re
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from firstgate.common.cancel import Cancellable
from firstgate.sandbox.errors import (
    CodeCancelledError,
    CodeExecutionError,
    CodeResourceLimitError,
    CodeRuntimeUnavailableError,
    CodeSandboxViolationError,
    CodeTimeoutError,
)
from firstgate.sandbox.executor import DEFAULT_TIMEOUT_S, Language, OutputLimits, traced

RESULT_TAG = "<<RESULT>>"
_RESULT = re.compile(f"{RESULT_TAG}(.*){RESULT_TAG}", re.DOTALL)
# Dify's own default key for the service.
DEFAULT_API_KEY = "dify-sandbox"
_LANGUAGE = {"python3": "python3", "javascript": "nodejs", "jinja2": "python3"}


def _b64(value: Any) -> str:
    return base64.b64encode(json.dumps(value, ensure_ascii=False).encode("utf-8")).decode("ascii")


def python_runner(code: str, inputs: Mapping[str, Any]) -> str:
    return (
        f"{code}\n\n"
        "import json as _fg_json\n"
        "from base64 import b64decode as _fg_b64decode\n\n"
        f'_fg_inputs = _fg_json.loads(_fg_b64decode("{_b64(inputs)}").decode("utf-8"))\n'
        "_fg_output = main(**_fg_inputs)\n"
        f'print("{RESULT_TAG}" + _fg_json.dumps(_fg_output, ensure_ascii=False) + "{RESULT_TAG}")\n'
    )


def node_runner(code: str, inputs: Mapping[str, Any]) -> str:
    return (
        f"{code}\n\n"
        f'var _fg_inputs = JSON.parse(Buffer.from("{_b64(inputs)}", "base64").toString("utf-8"));\n'
        "var _fg_output = main(_fg_inputs);\n"
        f'console.log("{RESULT_TAG}" + JSON.stringify(_fg_output) + "{RESULT_TAG}");\n'
    )


def jinja_runner(template: str, inputs: Mapping[str, Any], options: Mapping[str, Any]) -> str:
    return (
        "import json as _fg_json\n"
        "from base64 import b64decode as _fg_b64decode\n"
        "from jinja2.sandbox import SandboxedEnvironment\n\n"
        f'_fg_job = _fg_json.loads(_fg_b64decode("{_b64({"template": template, "inputs": inputs, "options": dict(options)})}").decode("utf-8"))\n'
        '_fg_text = SandboxedEnvironment(**_fg_job["options"]).from_string(_fg_job["template"]).render(**_fg_job["inputs"])\n'
        f'print("{RESULT_TAG}" + _fg_json.dumps({{"result": _fg_text}}, ensure_ascii=False) + "{RESULT_TAG}")\n'
    )


@dataclass(frozen=True, slots=True)
class DifySandboxConfig:
    base_url: str
    api_key: str = DEFAULT_API_KEY
    timeout_s: float = DEFAULT_TIMEOUT_S
    connect_timeout_s: float = 10.0
    network: bool = False
    max_reply_bytes: int = 16 * 1024 * 1024
    output_limits: OutputLimits = field(default_factory=OutputLimits)


class DifySandboxExecutor:
    def __init__(self, config: DifySandboxConfig) -> None:
        self.config = config
        self.output_limits = config.output_limits
        parts = urlsplit(config.base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if self._https else 80)
        self._path = parts.path.rstrip("/") + "/v1/sandbox/run"

    def start(self) -> None:
        return None  # stateless: every job is one request

    def close(self) -> None:
        return None

    @traced
    def execute(
        self,
        language: Language,
        code: str,
        inputs: Mapping[str, Any],
        *,
        cancel: Cancellable | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        options = options or {}
        if language == "python3":
            runner = python_runner(code, inputs)
        elif language == "javascript":
            runner = node_runner(code, inputs)
        else:
            runner = jinja_runner(code, inputs, options.get("options", {}))
        body = {
            "language": _LANGUAGE[language],
            "code": runner,
            "preload": "",
            "enable_network": self.config.network,
        }
        reply = self._post(json.dumps(body).encode("utf-8"), cancel)
        result = _parse(reply)
        if language == "jinja2":
            limit = int(options.get("max_chars") or 0)
            text = result.get("result")
            if limit and isinstance(text, str) and len(text) > limit:
                raise CodeResourceLimitError("errors.code.textLimit", limit=limit, size=len(text))
        return result

    def _connection(self) -> http.client.HTTPConnection:
        timeout = self.config.connect_timeout_s
        if self._https:
            context = ssl.create_default_context()
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=context
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _post(self, body: bytes, cancel: Cancellable | None) -> tuple[int, bytes]:
        url = self.config.base_url
        conn = self._connection()
        cancelled = False

        def abort(_reason: str) -> None:
            nonlocal cancelled
            cancelled = True
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        try:
            with cancel.attached(abort) if cancel else contextlib.nullcontext():
                try:
                    conn.connect()
                    assert conn.sock is not None
                    # The service answers when the code is done: wait that long, and a bit.
                    conn.sock.settimeout(self.config.timeout_s + self.config.connect_timeout_s)
                    conn.request(
                        "POST",
                        self._path,
                        body=body,
                        headers={
                            "Content-Type": "application/json",
                            "X-Api-Key": self.config.api_key,
                        },
                    )
                    response = conn.getresponse()
                    data = response.read(self.config.max_reply_bytes + 1)
                except TimeoutError:
                    if cancelled:
                        raise CodeCancelledError("errors.code.cancelled") from None
                    raise CodeTimeoutError(
                        "errors.code.timeout", limit=f"{self.config.timeout_s:g}"
                    ) from None
                except (OSError, http.client.HTTPException) as exc:
                    if cancelled:
                        raise CodeCancelledError("errors.code.cancelled") from None
                    raise CodeRuntimeUnavailableError(
                        "errors.code.service.unreachable",
                        url=url,
                        detail=str(exc) or type(exc).__name__,
                    ) from None
        finally:
            conn.close()
        if len(data) > self.config.max_reply_bytes:
            raise CodeResourceLimitError(
                "errors.code.outputLimit", limit=self.config.max_reply_bytes
            )
        if response.status != 200:
            raise CodeRuntimeUnavailableError(
                "errors.code.service.status",
                status=response.status,
                detail=data[:200].decode("utf-8", "replace").strip() or response.reason,
            )
        return response.status, data


def _parse(reply: tuple[int, bytes]) -> dict[str, Any]:
    _, data = reply
    try:
        envelope = json.loads(data)
    except ValueError:
        raise CodeRuntimeUnavailableError(
            "errors.code.service.badReply", detail=_excerpt(data)
        ) from None
    if not isinstance(envelope, dict):
        raise CodeRuntimeUnavailableError("errors.code.service.badReply", detail=_excerpt(data))
    if envelope.get("code") != 0:
        message = str(envelope.get("message") or envelope.get("code"))
        raise CodeRuntimeUnavailableError("errors.code.service.failed", detail=message[:500])
    payload = envelope.get("data")
    if not isinstance(payload, dict):
        raise CodeRuntimeUnavailableError("errors.code.service.badReply", detail=_excerpt(data))
    error = str(payload.get("error") or "").strip()
    if error:
        raise _service_error(error, str(payload.get("stderr") or ""))
    stdout = payload.get("stdout")
    match = _RESULT.search(stdout) if isinstance(stdout, str) else None
    if match is None:
        raise CodeExecutionError("errors.code.crashed", detail=_excerpt(str(stdout or "").encode()))
    try:
        result = json.loads(match.group(1))
    except ValueError as exc:
        raise CodeExecutionError("errors.code.notJson", detail=str(exc)) from None
    if not isinstance(result, dict):
        raise CodeExecutionError("errors.code.notDict", type=type(result).__name__)
    return result


def _service_error(error: str, stderr: str) -> CodeExecutionError:
    detail = (stderr.strip().splitlines() or [error])[-1][:500] if stderr.strip() else error[:500]
    lowered = error.lower()
    if "timeout" in lowered:
        return CodeTimeoutError("errors.code.service.failed", detail=error[:500])
    if "operation not permitted" in lowered or "network is disabled" in lowered:
        return CodeSandboxViolationError("errors.code.service.failed", detail=error[:500])
    return CodeExecutionError("errors.code.service.failed", detail=detail)


def _excerpt(data: bytes) -> str:
    return data[:200].decode("utf-8", "replace").strip()
