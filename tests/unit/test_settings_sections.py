"""Settings sections typed where they are read: a key the models do not know
(misspelt, or renamed by an upgrade) fails when the file loads, and each
reader gets its own section, typed, from `common.sections.Sections`."""

from __future__ import annotations

from pathlib import Path

import pytest
from firstgate.common.dsl import SettingsModel
from firstgate.common.problems import DslError
from firstgate.common.sections import Sections
from firstgate.connectors.hub import Connectors
from firstgate.connectors.settings import FilesSettings, HttpRequestSettings, ToolsSettings
from firstgate.nodes.document_extractor.settings import DocumentExtractorSettings
from firstgate.runtime import load_workflow
from firstgate.runtime.settings import RuntimeSettings, load_settings
from firstgate.sandbox.settings import CodeExecutorSettings
from pydantic import BaseModel, Field

from tests.connect_support import one_node_flow

# Every section of the file: one whose model is a pydantic model (the routing
# keys `providers` and `default` are a dict and a name). A section added later
# is covered here without a change.
SECTIONS = sorted(
    name
    for name, info in RuntimeSettings.model_fields.items()
    if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
)


def problems(tmp_path: Path, text: str) -> list[tuple[str, str | None]]:
    path = tmp_path / "settings.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DslError) as info:
        load_settings(path)
    return [(problem.message_key, problem.field) for problem in info.value.problems]


def test_every_section_is_a_settings_model() -> None:
    assert {"code_executor", "http_request", "knowledge", "tools", "files"} <= set(SECTIONS)
    for name in SECTIONS:
        model = RuntimeSettings.model_fields[name].annotation
        assert isinstance(model, type) and issubclass(model, SettingsModel), name


@pytest.mark.parametrize("section", SECTIONS)
def test_an_unknown_key_in_any_section_fails_at_load(tmp_path: Path, section: str) -> None:
    found = problems(tmp_path, f"{section}:\n  no_such_setting: 1\n")
    assert found == [
        ("dsl.settings.unknownKey", f"{tmp_path / 'settings.yaml'}.{section}.no_such_setting")
    ]


def test_a_renamed_setting_fails_at_load_and_says_so(tmp_path: Path) -> None:
    # `timeout` for `timeout_s`, `max_redirect` for `max_redirects`: before, both
    # were dropped and the defaults ran instead.
    path = tmp_path / "settings.yaml"
    path.write_text(
        "tools:\n  timeout: 5\n"
        "http_request:\n  max_redirect: 3\n"
        "knowledge:\n  datasets:\n    d: {kind: local, index: ./i.sqlite, topk: 2}\n",
        encoding="utf-8",
    )
    with pytest.raises(DslError) as info:
        load_settings(path)
    rendered = sorted(problem.render() for problem in info.value.problems)
    assert len(rendered) == 3
    assert any("tools.timeout" in line and "renamed" in line for line in rendered)
    assert any("http_request.max_redirect" in line for line in rendered)
    # (pydantic puts the dataset's kind in the path of a discriminated union)
    assert any("knowledge.datasets.d.local.topk" in line for line in rendered)


def test_an_unknown_top_level_key_fails_too(tmp_path: Path) -> None:
    found = problems(tmp_path, "http_requests:\n  allow: [10.0.0.0/8]\n")
    assert found == [("dsl.settings.unknownKey", f"{tmp_path / 'settings.yaml'}.http_requests")]


def test_each_reader_gets_its_own_section_typed() -> None:
    settings = RuntimeSettings.model_validate(
        {"tools": {"timeout_s": 7}, "document_extractor": {"max_pages": 3}}
    )
    connectors = Connectors.from_settings(settings)
    assert connectors.tools is settings.tools and connectors.tools.timeout_s == 7
    assert connectors.sections.get(DocumentExtractorSettings).limits().max_pages == 3
    assert connectors.sections.get(CodeExecutorSettings) is settings.code_executor


def test_without_a_file_every_section_is_its_defaults() -> None:
    sections = Sections()
    assert not sections.loaded
    assert sections.get(ToolsSettings) == ToolsSettings()
    assert sections.get(ToolsSettings) is sections.get(ToolsSettings)  # built once
    assert Connectors().sections.get(HttpRequestSettings).limits() == HttpRequestSettings().limits()


def test_a_model_that_is_no_section_of_a_loaded_file_is_a_bug() -> None:
    class Unassembled(SettingsModel):
        x: int = 1

    sections = Sections(RuntimeSettings())
    assert sections.loaded
    with pytest.raises(LookupError, match="Unassembled is not a section"):
        sections.get(Unassembled)


def test_two_sections_of_one_model_are_refused() -> None:
    class Twice(SettingsModel):
        a: FilesSettings = Field(default_factory=FilesSettings)
        b: FilesSettings = Field(default_factory=FilesSettings)

    with pytest.raises(TypeError, match="share the model FilesSettings"):
        Sections(Twice())


def test_node_models_check_against_the_sections_the_workflow_loads_with(tmp_path: Path) -> None:
    # The loader hands the file's sections to node models (the validation
    # context): a `workflow` tool runs only when the tools section names its file.
    inner = tmp_path / "inner.yml"
    inner.write_text("app: {mode: workflow}\n", encoding="utf-8")
    flow = one_node_flow(
        "tool",
        {"provider_type": "workflow", "provider_id": "wf-1", "tool_name": "t"},
        {"out": ["n", "text"]},
    )
    with pytest.raises(DslError) as info:
        load_workflow(flow, settings=RuntimeSettings())
    assert [p.message_key for p in info.value.problems] == ["dsl.tool.workflowNeedsDefinition"]
    defined = RuntimeSettings.model_validate(
        {"tools": {"workflow_providers": {"wf-1": {"file": str(inner)}}}}
    )
    assert load_workflow(flow, settings=defined).graph.nodes["n"].type == "tool"


def test_an_optional_section_may_be_absent() -> None:
    class Mail(SettingsModel):
        host: str  # no default: the section is all or nothing

    class Route(SettingsModel):
        url: str = ""

    class WithOptional(RuntimeSettings):
        mail: Mail | None = None
        routes: dict[str, Route] = Field(default_factory=dict)

    absent = Sections(WithOptional())
    assert absent.find(Mail) is None
    given = Sections(WithOptional.model_validate({"mail": {"host": "smtp.example"}}))
    found = given.find(Mail)
    assert found is not None and found.host == "smtp.example"
    with pytest.raises(LookupError):  # entries of a section are no section
        absent.find(Route)
