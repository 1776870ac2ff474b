"""The `code_executor` section of the settings file: where code nodes (and
templates that need isolation) run. Read by the runtime when it builds the
executor (`runtime/execution/code_executors.py`).

    code_executor:
      kind: local             # the default: a pool of sandboxed worker processes
      workers: 2
      timeout_s: 10           # wall clock per job
      cpu_s: 5                # CPU time per job (rounded up to whole seconds)
      memory_mb: 256
      file_size_mb: 16
      disk_mb: 64             # all files of a worker's jobs together
      open_files: 64
      processes: 32           # RLIMIT_NPROC; new processes are refused anyway
      output_bytes: 4194304   # the JSON result of one job
      network: false          # code gets no network unless this is true
      require_landlock: true  # refuse to run code without Landlock's file-system confinement
      python: null            # the workers' interpreter (default: this one)
      node: null              # Node.js for javascript (default: `node` on PATH)
      output_limits:          # Dify's CODE_MAX_* checks of what `main` returns
        max_string_length: 400000
        max_number: 9223372036854775807
        min_number: -9223372036854775807
        max_precision: 20
        max_depth: 5
        max_string_array_length: 30
        max_object_array_length: 30
        max_number_array_length: 1000

    code_executor:
      kind: dify-sandbox      # a running dify-sandbox service instead
      base_url: http://sandbox:8194
      api_key_env: SANDBOX_API_KEY   # the variable holding its key (default key: dify-sandbox)
      timeout_s: 10
      network: false          # sent as enable_network
"""

from __future__ import annotations

from typing import Annotated, Literal

from firstgate.common.dsl import PositiveSeconds, SettingsModel, between, dsl_error
from firstgate.sandbox.executor import OutputLimits
from firstgate.sandbox.process_pool import ProcessSandboxConfig
from firstgate.sandbox.worker_process import SandboxLimits
from pydantic import Field, model_validator

# Every default is the executor's own; the section only lets the file change it.
_LIMITS = SandboxLimits()
_OUTPUT = OutputLimits()
_POOL = ProcessSandboxConfig()


class OutputLimitSettings(SettingsModel):
    max_string_length: Annotated[int, between(1, 1 << 30)] = _OUTPUT.max_string_length
    max_number: int | float = _OUTPUT.max_number
    min_number: int | float = _OUTPUT.min_number
    max_precision: Annotated[int, between(0, 100)] = _OUTPUT.max_precision
    max_depth: Annotated[int, between(1, 100)] = _OUTPUT.max_depth
    max_string_array_length: Annotated[int, between(1, 1 << 24)] = _OUTPUT.max_string_array_length
    max_object_array_length: Annotated[int, between(1, 1 << 24)] = _OUTPUT.max_object_array_length
    max_number_array_length: Annotated[int, between(1, 1 << 24)] = _OUTPUT.max_number_array_length

    def limits(self) -> OutputLimits:
        return OutputLimits(**self.model_dump())


class CodeExecutorSettings(SettingsModel):
    kind: Literal["local", "dify-sandbox"] = "local"
    timeout_s: PositiveSeconds = _LIMITS.wall_s
    network: bool = _POOL.network
    output_limits: OutputLimitSettings = Field(default_factory=OutputLimitSettings)
    # kind: local
    workers: Annotated[int, between(1, 64)] = _POOL.workers
    cpu_s: PositiveSeconds = _LIMITS.cpu_s
    memory_mb: Annotated[int, between(32, 1 << 20)] = _LIMITS.memory_mb
    file_size_mb: Annotated[int, between(1, 1 << 20)] = _LIMITS.file_size_mb
    disk_mb: Annotated[int, between(1, 1 << 20)] = _LIMITS.disk_mb
    open_files: Annotated[int, between(16, 1 << 20)] = _LIMITS.open_files
    processes: Annotated[int, between(1, 1 << 20)] = _LIMITS.processes
    output_bytes: Annotated[int, between(1024, 1 << 30)] = _LIMITS.output_bytes
    require_landlock: bool = _POOL.require_landlock
    python: str | None = None
    node: str | None = None
    # kind: dify-sandbox
    base_url: str | None = None
    api_key_env: str | None = None

    @model_validator(mode="after")
    def _service_url(self) -> CodeExecutorSettings:
        if self.kind == "dify-sandbox":
            if not self.base_url:
                raise dsl_error(
                    "dsl.models.baseUrl", "base_url is required for kind {kind}", kind=self.kind
                )
            if not self.base_url.startswith(("http://", "https://")):
                raise dsl_error(
                    "dsl.models.baseUrlScheme",
                    "base_url must start with http:// or https://, got {value}",
                    value=repr(self.base_url[:80]),
                )
        return self

    @property
    def wall_s(self) -> float:
        """`timeout_s`, or the executor's default where the file leaves it empty."""
        return float(self.timeout_s or _LIMITS.wall_s)

    def sandbox_limits(self) -> SandboxLimits:
        return SandboxLimits(
            wall_s=self.wall_s,
            cpu_s=float(self.cpu_s or _LIMITS.cpu_s),
            memory_mb=self.memory_mb,
            file_size_mb=self.file_size_mb,
            disk_mb=self.disk_mb,
            open_files=self.open_files,
            processes=self.processes,
            output_bytes=self.output_bytes,
        )
