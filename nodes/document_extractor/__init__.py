"""Document-extractor node: the text of a file variable (one file, or a list).

Fields: `variable_selector` (a file or an array of files). Output `text`: a
string for one file, an array of strings for a list (an empty list gives
an empty array), as Dify does. Local and tool files are read from disk;
remote files are fetched through the guarded HTTP client (the same network
policy and size caps as an http-request node). Formats: see
`nodes.document_text`. Any failure (a missing variable, a value that is not
a file, an unsupported, encrypted, corrupt or oversized file) is a typed
error naming the file, handled by the node's error strategy.

Limits come from the settings file's `document_extractor` section.
"""

from __future__ import annotations

from typing import Any

from firstgate.common.files import File
from firstgate.nodes.base import NodeContext, NodeResult
from firstgate.nodes.config import BaseNodeData, SelectorField
from firstgate.nodes.document_extractor.settings import DocumentExtractorSettings
from firstgate.nodes.document_extractor.text import DocumentError, extract_text
from firstgate.nodes.file_content import read
from firstgate.nodes.selectors import Selector
from firstgate.nodes.spec import NodeSpec


class Data(BaseNodeData):
    variable_selector: SelectorField
    is_array_file: bool = False  # the editor's hint; the value decides the output shape


def selectors(data: Data) -> list[Selector]:
    return [data.variable_selector]


def output_names(data: Data) -> set[str]:
    return {"text"}


def _files(value: Any, selector: Selector) -> File | list[File]:
    where = ".".join(selector)
    if value is None:
        raise DocumentError("errors.document.missing", selector=where)
    if isinstance(value, File):
        return value
    if isinstance(value, list | tuple):
        files = [item for item in value if item]
        if all(isinstance(item, File) for item in files):
            return files
    raise DocumentError("errors.document.notFiles", selector=where)


def _text(file: File, ctx: NodeContext) -> str:
    section = (
        ctx.connectors.sections.get(DocumentExtractorSettings)
        if ctx.connectors
        else DocumentExtractorSettings()
    )
    data = read(file, ctx, section.max_file_bytes)
    return extract_text(
        data,
        name=file.filename or file.id,
        extension=file.extension,
        mime_type=file.mime_type,
        limits=section.limits(),
    )


def run(data: Data, ctx: NodeContext) -> NodeResult:
    found = _files(ctx.variables.get(data.variable_selector), data.variable_selector)
    documents = found if isinstance(found, list) else [found]
    process_data = {"documents": [f.to_dict() for f in documents]}
    text: str | list[str] = (
        [_text(f, ctx) for f in found] if isinstance(found, list) else _text(found, ctx)
    )
    return NodeResult(outputs={"text": text}, process_data=process_data)


SPEC = NodeSpec(
    type="document-extractor",
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=True,
)
