"""The runtime settings file (`firstgate run --models FILE`): where each model
provider is served, and one section per outside-world concern.

The file is one YAML mapping. Its model-routing keys (`providers`, `default`,
`breaker`) sit at the top level, as in the original models file; every other
concern owns one top-level key, its *section*.

Adding a section is one new module here with one pydantic model (a
`nodes.config.DslModel`, so every mistake becomes a located, translated
problem) and one line in `RuntimeSettings` below:

    code_executor: CodeExecutorSettings = Field(default_factory=CodeExecutorSettings)

The runtime hands `settings.<section>` to whatever needs it (through the node
context); nothing else reads the file.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import Field, ValidationError

from runtime.problems import DslError, Problem, problems_from_validation
from runtime.settings.http_request import HttpRequestSettings
from runtime.settings.knowledge import KnowledgeSettings
from runtime.settings.providers import ProvidersSection
from runtime.settings.tools import ToolsSettings


class RuntimeSettings(ProvidersSection):
    """The whole settings file. Sections: one field each (see the module docstring)."""

    http_request: HttpRequestSettings = Field(default_factory=HttpRequestSettings)
    knowledge: KnowledgeSettings = Field(default_factory=KnowledgeSettings)
    tools: ToolsSettings = Field(default_factory=ToolsSettings)


def load_settings(path: str | Path) -> RuntimeSettings:
    """Read a settings file; every problem is reported through DslError."""
    file = Path(path)
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DslError([Problem("dsl.file.missing", {"path": str(file)})]) from None
    except yaml.YAMLError as exc:
        raise DslError(
            [Problem("dsl.file.yaml", {"path": str(file), "where": "?", "detail": str(exc)})]
        ) from None
    try:
        return RuntimeSettings.model_validate(raw or {})
    except ValidationError as exc:
        raise DslError(problems_from_validation(exc, prefix=str(file))) from None
