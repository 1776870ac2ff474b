"""A worker's answer for one job -> the result, or the typed error it stands for."""

from __future__ import annotations

from typing import Any

from firstgate.sandbox.errors import (
    CodeCancelledError,
    CodeExecutionError,
    CodeResourceLimitError,
    CodeRuntimeUnavailableError,
    CodeSandboxViolationError,
    CodeTimeoutError,
)

RUNTIMES = {"python3": "Python", "javascript": "Node.js", "jinja2": "Jinja2"}


def _limit(answer: dict[str, Any]) -> Any:
    return answer.get("limit", "?")


def result_or_raise(answer: dict[str, Any], language: str) -> dict[str, Any]:
    """The object `main` returned, or the error the answer describes."""
    if answer.get("status") == "ok" and isinstance(answer.get("result"), dict):
        return answer["result"]
    raise error_for(answer, language)


def error_for(answer: dict[str, Any], language: str) -> CodeExecutionError:
    kind = str(answer.get("kind", "crashed"))
    if kind == "exception":
        kind_name = str(answer.get("type") or "Error")
        message = str(answer.get("message") or "")
        line = answer.get("line")
        if isinstance(line, int):
            return CodeExecutionError(
                "errors.code.exceptionAtLine", type=kind_name, message=message, line=line
            )
        return CodeExecutionError("errors.code.exception", type=kind_name, message=message)
    if kind == "timeout":
        return CodeTimeoutError("errors.code.timeout", limit=_limit(answer))
    if kind == "cpu":
        return CodeTimeoutError("errors.code.cpuLimit", limit=_limit(answer))
    if kind in _LIMITS:
        extra = {"size": answer["size"]} if isinstance(answer.get("size"), int) else {}
        return CodeResourceLimitError(_LIMITS[kind], limit=_limit(answer), **extra)
    if kind == "violation":
        operation = str(answer.get("operation") or "process")
        key = _VIOLATIONS.get(operation, "errors.code.violation.process")
        return CodeSandboxViolationError(key)
    if kind == "no_main":
        return CodeExecutionError("errors.code.noMain")
    if kind == "not_dict":
        return CodeExecutionError("errors.code.notDict", type=str(answer.get("type", "?")))
    if kind == "not_json":
        return CodeExecutionError("errors.code.notJson", detail=str(answer.get("detail", "")))
    if kind == "runtime_missing":
        return CodeRuntimeUnavailableError(
            "errors.code.runtimeMissing", language=language, runtime=RUNTIMES.get(language, "?")
        )
    if kind in ("cancelled", "orphaned"):
        return CodeCancelledError("errors.code.cancelled")
    detail = str(answer.get("detail") or "")
    stderr = str(answer.get("stderr") or "").strip()
    if stderr:
        detail = f"{detail}: {stderr.splitlines()[-1][:300]}"
    return CodeExecutionError("errors.code.crashed", detail=detail or kind)


_LIMITS = {
    "memory": "errors.code.memoryLimit",
    "file_size": "errors.code.fileSizeLimit",
    "disk": "errors.code.diskLimit",
    "open_files": "errors.code.openFilesLimit",
    "output": "errors.code.outputLimit",
    "text_too_long": "errors.code.textLimit",
}
_VIOLATIONS = {
    "network": "errors.code.violation.network",
    "process": "errors.code.violation.process",
    "signal": "errors.code.violation.signal",
}
