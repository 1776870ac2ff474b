"""The runtime settings file (`firstgate run --models FILE`): where each model
provider is served, and one section per outside-world concern.

The file is one YAML mapping. Its model-routing keys (`providers`, `default`,
`breaker`) sit at the top level, as in the original models file; every other
concern owns one top-level key, its *section*.

This package only assembles the file. A section's model (a
`common.dsl.SettingsModel`: every mistake, an unknown key included, becomes a
located, translated problem at load time) lives beside the code that reads
it, at or below that code's layer, and is one line in `RuntimeSettings`:

    code_executor: CodeExecutorSettings = Field(default_factory=CodeExecutorSettings)

Readers get their section typed: the runtime as `settings.<section>`, the
layers below through `common.sections.Sections` (`sections.get(ToolsSettings)`),
which the runtime builds from the loaded file.
"""

from __future__ import annotations

from pathlib import Path

from firstgate.common.problems import DslError, problems_from_validation
from firstgate.common.telemetry_settings import TelemetrySettings
from firstgate.common.yaml_reader import read_yaml_mapping
from firstgate.connectors.settings import (
    FilesSettings,
    HttpRequestSettings,
    KnowledgeSettings,
    ToolsSettings,
)
from firstgate.connectors.smtp_mail import EmailSettings
from firstgate.nodes.document_extractor.settings import DocumentExtractorSettings
from firstgate.runtime.settings.providers import ProvidersSection
from firstgate.sandbox.settings import CodeExecutorSettings
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
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)


def load_settings(path: str | Path) -> RuntimeSettings:
    """Read a settings file; every problem is reported through DslError."""
    file = Path(path)
    raw = read_yaml_mapping(file, empty={}, not_mapping="cli.models.notMapping")
    try:
        return RuntimeSettings.model_validate(raw)
    except ValidationError as exc:
        raise DslError(problems_from_validation(exc, prefix=str(file)), source=file) from None
