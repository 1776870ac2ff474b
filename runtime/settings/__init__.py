"""The runtime settings file (`firstgate run --models FILE`): where each model
provider is served, and one section per outside-world concern.

The file is one YAML mapping. Its model-routing keys (`providers`, `default`,
`breaker`) sit at the top level, as in the original models file; every other
concern owns one top-level key, its *section*.

Adding a section is one new module here with one pydantic model (a
`common.dsl.DslModel`, so every mistake becomes a located, translated
problem) and one line in `RuntimeSettings` below:

    code_executor: CodeExecutorSettings = Field(default_factory=CodeExecutorSettings)

The runtime hands `settings.<section>` to whatever needs it (through the node
context); nothing else reads the file.
"""

from __future__ import annotations

from pathlib import Path

from firstgate.runtime.dsl.problems import DslError, problems_from_validation
from firstgate.runtime.dsl.yaml_reader import read_yaml_mapping
from firstgate.runtime.settings.code_executor import CodeExecutorSettings
from firstgate.runtime.settings.document_extractor import DocumentExtractorSettings
from firstgate.runtime.settings.email import EmailSettings
from firstgate.runtime.settings.files import FilesSettings
from firstgate.runtime.settings.http_request import HttpRequestSettings
from firstgate.runtime.settings.knowledge import KnowledgeSettings
from firstgate.runtime.settings.providers import ProvidersSection
from firstgate.runtime.settings.tools import ToolsSettings
from pydantic import Field, ValidationError


class RuntimeSettings(ProvidersSection):
    """The whole settings file. Sections: one field each (see the module docstring)."""

    code_executor: CodeExecutorSettings = Field(default_factory=CodeExecutorSettings)
    http_request: HttpRequestSettings = Field(default_factory=HttpRequestSettings)
    knowledge: KnowledgeSettings = Field(default_factory=KnowledgeSettings)
    tools: ToolsSettings = Field(default_factory=ToolsSettings)
    files: FilesSettings = Field(default_factory=FilesSettings)
    document_extractor: DocumentExtractorSettings = Field(default_factory=DocumentExtractorSettings)
    email: EmailSettings = Field(default_factory=EmailSettings)


def load_settings(path: str | Path) -> RuntimeSettings:
    """Read a settings file; every problem is reported through DslError."""
    file = Path(path)
    raw = read_yaml_mapping(file, empty={}, not_mapping="cli.models.notMapping")
    try:
        return RuntimeSettings.model_validate(raw)
    except ValidationError as exc:
        raise DslError(problems_from_validation(exc, prefix=str(file)), source=file) from None
