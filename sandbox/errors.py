"""What running untrusted code can end in, as typed errors.

Every error carries a message key (rendered through `locales`) and its
parameters; `str(error)` is the English text. All derive from
`CodeExecutionError`, Dify's name for a code node that did not produce a
result, so they flow into retry, fail-branch and default-value like any
other node error.
"""

from __future__ import annotations

from typing import Any


class CodeExecutionError(Exception):
    """The code did not produce a result: it raised, returned something else
    than an object, or its process ended without one."""

    def __init__(self, message_key: str, english: str, **params: Any) -> None:
        super().__init__(english)
        self.message_key = message_key
        self.params = params


class CodeTimeoutError(CodeExecutionError):
    """Wall-clock timeout or CPU-time limit (`params["limit_kind"]`: wall or cpu)."""


class CodeResourceLimitError(CodeExecutionError):
    """Memory, file size, open files or the size of the result."""


class CodeSandboxViolationError(CodeExecutionError):
    """The code tried something the sandbox forbids: network, processes, signals."""


class CodeRuntimeUnavailableError(CodeExecutionError):
    """The code cannot run here: a missing language runtime, a sandbox that
    cannot confine it, or an unreachable sandbox service."""


class CodeCancelledError(CodeExecutionError):
    """The run was cancelled while the code ran; its process was killed."""
