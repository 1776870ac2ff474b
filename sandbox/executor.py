"""The one interface every code executor implements, and the limits a code
node checks its outputs against.

`execute(language, code, inputs)` runs `main(**inputs)` (Python) or
`main(inputs)` (JavaScript) of untrusted code somewhere it cannot hurt the
runtime and returns the object `main` returned; `language="jinja2"` renders a
template with `inputs` as its variables and returns `{"result": text}`. Every
failure is a `sandbox.errors.CodeExecutionError`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from firstgate.common.cancel import Cancellable
from firstgate.common.telemetry import client_span

Language = Literal["python3", "javascript", "jinja2"]

# How long one job may take (wall clock) unless the settings say otherwise,
# for either executor.
DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class OutputLimits:
    """How a code node checks what `main` returned. The defaults are Dify's
    (`CODE_MAX_*` in its configuration)."""

    max_string_length: int = 400_000
    max_number: int | float = 9223372036854775807
    min_number: int | float = -9223372036854775807
    max_precision: int = 20
    max_depth: int = 5
    max_string_array_length: int = 30
    max_object_array_length: int = 30
    max_number_array_length: int = 1000


class CodeExecutor(Protocol):
    output_limits: OutputLimits

    def start(self) -> None:
        """Get ready (start workers, check the service); idempotent."""
        ...

    def execute(
        self,
        language: Language,
        code: str,
        inputs: Mapping[str, Any],
        *,
        cancel: Cancellable | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]: ...

    def close(self) -> None:
        """Stop everything it started; idempotent."""
        ...


_Execute = TypeVar("_Execute", bound=Callable[..., dict[str, Any]])


def traced(execute: _Execute) -> _Execute:
    """An executor's `execute` as a span of its own (`code python3`, under the
    node's span; nothing when tracing is off): every executor's jobs alike."""

    @functools.wraps(execute)
    def run(self: Any, language: Language, code: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        attributes = {
            "firstgate.code.language": language,
            "firstgate.code.executor": type(self).__name__,
        }
        with client_span(f"code {language}", attributes):
            return execute(self, language, code, *args, **kwargs)

    return run  # type: ignore[return-value]
