"""The dify-sandbox executor against a real-socket fake of the service that runs
the posted scripts for real (so the runners that wrap user code are tested too)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from firstgate.common.cancel import CancelToken
from firstgate.runtime import load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.execution.code_executors import build_code_executor
from firstgate.runtime.models.routes import RouteError
from firstgate.runtime.settings import RuntimeSettings
from firstgate.sandbox.dify_sandbox import DifySandboxConfig, DifySandboxExecutor
from firstgate.sandbox.errors import (
    CodeCancelledError,
    CodeExecutionError,
    CodeRuntimeUnavailableError,
    CodeSandboxViolationError,
    CodeTimeoutError,
)

from tests.fakes.dify_sandbox import Behaviour, FakeDifySandbox
from tests.integration.sandbox_support import HAS_NODE


@pytest.fixture
def service() -> Iterator[FakeDifySandbox]:
    fake = FakeDifySandbox(api_key="s3cret-key")
    yield fake
    fake.close()


def executor(service: FakeDifySandbox, **overrides: object) -> DifySandboxExecutor:
    options: dict[str, object] = {
        "base_url": service.base_url,
        "api_key": "s3cret-key",
        "timeout_s": 5.0,
    }
    options.update(overrides)
    return DifySandboxExecutor(DifySandboxConfig(**options))  # type: ignore[arg-type]


def test_python_runs_and_the_request_has_the_apis_shape(service: FakeDifySandbox) -> None:
    code = "def main(a: int, name: str) -> dict:\n    return {'b': a + 1, 'hi': f'héllo {name}'}\n"
    result = executor(service).execute("python3", code, {"a": 41, "name": "Ada"})
    assert result == {"b": 42, "hi": "héllo Ada"}
    (request,) = service.requests
    assert request["path"] == "/v1/sandbox/run"
    assert request["headers"]["X-Api-Key"] == "s3cret-key"
    assert set(request["body"]) == {"language", "code", "preload", "enable_network"}
    assert request["body"]["language"] == "python3"
    assert request["body"]["enable_network"] is False
    assert code in request["body"]["code"]


@pytest.mark.skipif(not HAS_NODE, reason="Node.js is not installed")
def test_javascript_is_sent_as_nodejs(service: FakeDifySandbox) -> None:
    result = executor(service).execute(
        "javascript", "function main({a}) { return {b: a * 2} }", {"a": 21}
    )
    assert result == {"b": 42}
    assert service.requests[0]["body"]["language"] == "nodejs"


def test_jinja2_renders_through_a_python_runner(service: FakeDifySandbox) -> None:
    result = executor(service).execute(
        "jinja2",
        "{% for x in items %}{{ x }};{% endfor %}",
        {"items": [1, 2]},
        options={"options": {}},
    )
    assert result == {"result": "1;2;"}


def test_user_exception_is_a_code_execution_error(service: FakeDifySandbox) -> None:
    with pytest.raises(CodeExecutionError) as caught:
        executor(service).execute("python3", "def main():\n    return {'x': 1 / 0}\n", {})
    assert caught.value.message_key == "errors.code.service.failed"
    assert "ZeroDivisionError" in str(caught.value)


def test_not_an_object(service: FakeDifySandbox) -> None:
    with pytest.raises(CodeExecutionError) as caught:
        executor(service).execute("python3", "def main():\n    return [1]\n", {})
    assert caught.value.message_key == "errors.code.notDict"


def test_wrong_key_is_reported_with_the_status(service: FakeDifySandbox) -> None:
    with pytest.raises(CodeRuntimeUnavailableError) as caught:
        executor(service, api_key="wrong").execute("python3", "def main():\n    return {}\n", {})
    assert caught.value.params["status"] == 401
    assert "wrong" not in str(caught.value)


def test_busy_service(service: FakeDifySandbox) -> None:
    service.behaviour = Behaviour(status=503)
    with pytest.raises(CodeRuntimeUnavailableError) as caught:
        executor(service).execute("python3", "def main():\n    return {}\n", {})
    assert caught.value.params["status"] == 503


def test_service_timeout_is_a_timeout_error(service: FakeDifySandbox) -> None:
    service.behaviour = Behaviour(timeout_s=0.5)
    with pytest.raises(CodeTimeoutError):
        executor(service).execute("python3", "import time\ndef main():\n    time.sleep(5)\n", {})


def test_network_refused_by_the_service(service: FakeDifySandbox) -> None:
    service.behaviour = Behaviour(network_enabled=False)
    with pytest.raises(CodeRuntimeUnavailableError) as caught:
        executor(service, network=True).execute("python3", "def main():\n    return {}\n", {})
    assert "network is disabled" in str(caught.value)


def test_operation_not_permitted_is_a_violation(service: FakeDifySandbox) -> None:
    service.behaviour = Behaviour(
        envelope={
            "code": 0,
            "message": "success",
            "data": {"stdout": "", "error": "error: operation not permitted\n"},
        }
    )
    with pytest.raises(CodeSandboxViolationError):
        executor(service).execute("python3", "def main():\n    return {}\n", {})


@pytest.mark.parametrize(
    "envelope",
    [
        "not json at all",
        {"code": 0, "message": "success", "data": None},
        {"code": 0, "message": "success", "data": {"stdout": "no tags here", "error": ""}},
        {
            "code": 0,
            "message": "success",
            "data": {"stdout": "<<RESULT>>{broken<<RESULT>>", "error": ""},
        },
    ],
)
def test_malformed_replies_are_typed_errors(service: FakeDifySandbox, envelope: object) -> None:
    service.behaviour = Behaviour(envelope=envelope)  # type: ignore[arg-type]
    with pytest.raises(CodeExecutionError):
        executor(service).execute("python3", "def main():\n    return {}\n", {})


def test_unreachable_service() -> None:
    dead = DifySandboxExecutor(
        DifySandboxConfig(base_url="http://127.0.0.1:9", timeout_s=1, connect_timeout_s=1)
    )
    with pytest.raises(CodeRuntimeUnavailableError) as caught:
        dead.execute("python3", "def main():\n    return {}\n", {})
    assert caught.value.message_key == "errors.code.service.unreachable"


def test_cancel_shuts_the_request_down(service: FakeDifySandbox) -> None:
    service.behaviour = Behaviour(delay_s=10)
    token = CancelToken()
    threading.Timer(0.3, token.cancel, args=("stop",)).start()
    started = time.monotonic()
    with pytest.raises(CodeCancelledError):
        executor(service).execute("python3", "def main():\n    return {}\n", {}, cancel=token)
    assert time.monotonic() - started < 5  # not the service's 10 s


def test_oversized_reply_is_refused(service: FakeDifySandbox) -> None:
    with pytest.raises(CodeExecutionError) as caught:
        executor(service, max_reply_bytes=1000).execute(
            "python3", "def main():\n    return {'s': 'x' * 5000}\n", {}
        )
    assert caught.value.message_key == "errors.code.outputLimit"


def test_workflow_uses_the_service_from_the_settings_file(
    service: FakeDifySandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_KEY_FOR_TEST", "s3cret-key")
    settings = RuntimeSettings.model_validate(
        {
            "code_executor": {
                "kind": "dify-sandbox",
                "base_url": service.base_url,
                "api_key_env": "SANDBOX_KEY_FOR_TEST",
            }
        }
    )
    document = {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "t", "mode": "workflow"},
        "workflow": {
            "graph": {
                "nodes": [
                    {"id": "s", "data": {"type": "start", "title": "s"}},
                    {
                        "id": "c",
                        "data": {
                            "type": "code",
                            "title": "c",
                            "code_language": "python3",
                            "code": "def main():\n    return {'r': 'from the service'}\n",
                            "outputs": {"r": {"type": "string"}},
                        },
                    },
                    {
                        "id": "e",
                        "data": {
                            "type": "end",
                            "title": "e",
                            "outputs": [{"variable": "r", "value_selector": ["c", "r"]}],
                        },
                    },
                ],
                "edges": [{"source": "s", "target": "c"}, {"source": "c", "target": "e"}],
            }
        },
    }
    events = list(load_workflow(document).run({}, settings=settings))
    assert isinstance(events[-1], ev.WorkflowSucceeded)
    assert events[-1].outputs == {"r": "from the service"}
    assert len(service.requests) == 1


def test_unset_key_variable_is_refused_before_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_SANDBOX_KEY", raising=False)
    settings = RuntimeSettings.model_validate(
        {
            "code_executor": {
                "kind": "dify-sandbox",
                "base_url": "http://x:1",
                "api_key_env": "NO_SUCH_SANDBOX_KEY",
            }
        }
    )
    with pytest.raises(RouteError) as caught:
        build_code_executor(settings.code_executor)
    assert "NO_SUCH_SANDBOX_KEY" in str(caught.value)


def test_dify_sandbox_needs_a_base_url() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        RuntimeSettings.model_validate({"code_executor": {"kind": "dify-sandbox"}})
