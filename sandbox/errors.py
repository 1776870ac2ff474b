"""What running untrusted code can end in, as typed errors.

Each is a `LocalizedError` (a message key and its parameters, rendered through
`locales`). All derive from `CodeExecutionError`, Dify's name for a code node
that did not produce a result, so they flow into retry, fail-branch and
default-value like any other node error.
"""

from __future__ import annotations

from firstgate.locales.localized_error import LocalizedError


class CodeExecutionError(LocalizedError):
    """The code did not produce a result: it raised, returned something other
    than an object, or its process ended without one."""


class CodeTimeoutError(CodeExecutionError):
    """The wall-clock timeout or the CPU-time limit."""


class CodeResourceLimitError(CodeExecutionError):
    """Memory, file size, open files, or the size of the result."""


class CodeSandboxViolationError(CodeExecutionError):
    """The code tried what the sandbox forbids: the network, new processes,
    signals to other processes."""


class CodeRuntimeUnavailableError(CodeExecutionError):
    """The code cannot run here: a missing language runtime, a sandbox that
    cannot confine it, an unreachable or failing sandbox service."""


class CodeCancelledError(CodeExecutionError):
    """The run was cancelled while the code ran; its process was killed."""
