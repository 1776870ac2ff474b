"""The settings file's `code_executor` section -> the executor a run hands its
nodes (`NodeContext.code_executor`)."""

from __future__ import annotations

import os

from firstgate.nodes.templates.jinja import OPTIONS as JINJA_OPTIONS
from firstgate.runtime.models.routes import RouteError
from firstgate.sandbox.dify_sandbox import DEFAULT_API_KEY, DifySandboxConfig, DifySandboxExecutor
from firstgate.sandbox.executor import CodeExecutor
from firstgate.sandbox.process_pool import ProcessSandbox, ProcessSandboxConfig
from firstgate.sandbox.settings import CodeExecutorSettings


def build_code_executor(settings: CodeExecutorSettings | None = None) -> CodeExecutor:
    """A new executor (no process is started until it is first used or started).

    Raises RouteError when a dify-sandbox key variable is named but unset.
    """
    settings = settings or CodeExecutorSettings()
    output_limits = settings.output_limits.limits()
    if settings.kind == "dify-sandbox":
        assert settings.base_url is not None  # the section's validator requires it
        api_key = DEFAULT_API_KEY
        if settings.api_key_env:
            api_key = os.environ.get(settings.api_key_env, "")
            if not api_key:
                raise RouteError("cli.codeExecutor.missingKey", env=settings.api_key_env)
        return DifySandboxExecutor(
            DifySandboxConfig(
                base_url=settings.base_url,
                api_key=api_key,
                timeout_s=settings.wall_s,
                network=settings.network,
                output_limits=output_limits,
            )
        )
    return ProcessSandbox(
        ProcessSandboxConfig(
            workers=settings.workers,
            limits=settings.sandbox_limits(),
            network=settings.network,
            require_landlock=settings.require_landlock,
            python=settings.python,
            node=settings.node,
            output_limits=output_limits,
            jinja_options=JINJA_OPTIONS,
        )
    )
