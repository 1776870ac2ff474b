"""The document extractor on documents made by the libraries (or by hand) in
the test: every supported format, Dify's output shapes, the limits, and the
typed errors for encrypted, corrupt and unsupported files. Remote files go
through the guarded HTTP client against a real loopback server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from firstgate.common.cancel import CancelToken
from firstgate.common.files import File, FileError, from_path, from_remote_url
from firstgate.connectors.errors import AddressRefusedError
from firstgate.connectors.hub import Connectors
from firstgate.nodes import document_extractor
from firstgate.nodes.base import NodeContext
from firstgate.nodes.document_extractor.text import DocumentError

from tests import documents
from tests.connect_support import settings
from tests.fakes.http_target import HttpTarget


class Pool:
    """The variables the node reads (a dict behind the engine's reader interface)."""

    def __init__(self, values: dict[tuple[str, ...], Any]) -> None:
        self.values = values

    def get(self, selector: tuple[str, ...]) -> Any:
        return self.values.get(tuple(selector))


def extract(value: Any, **sections: Any) -> dict[str, Any]:
    data = document_extractor.Data.model_validate(
        {"type": "document-extractor", "variable_selector": ["start", "doc"]}
    )
    ctx = NodeContext(
        node_id="n",
        attempt=1,
        variables=Pool({("start", "doc"): value}),
        cancel=CancelToken(),
        connectors=Connectors.from_settings(settings(**sections)),
    )
    result = document_extractor.run(data, ctx)
    assert result.process_data is not None
    return {"text": result.outputs["text"], "documents": result.process_data["documents"]}


@pytest.fixture
def write(tmp_path: Path) -> Any:
    def make(name: str, content: bytes | str) -> File:
        path = tmp_path / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return from_path(path)

    return make


def test_every_supported_format(write: Any) -> None:
    cases: list[tuple[str, bytes | str, str]] = [
        ("notes.txt", "plain words\nsecond line", "plain words\nsecond line"),
        ("readme.md", "# Title\n\n*emphasis*", "# Title\n\n*emphasis*"),
        ("page.html", "<p>Hello <b>web</b></p>", "<p>Hello <b>web</b></p>"),  # not stripped
        ("data.json", '{"b": [1, 2], "a": "ü"}', '{\n  "b": [\n    1,\n    2\n  ],\n  "a": "ü"\n}'),
        ("table.csv", 'name,note\nada,"line one\nline two"\n', "| name | note |\n| ---- | ---- |\n| ada | line one line two |\n"),
        ("app.properties", "# comment\nhost = example\nport: 80\nflag", "# comment\nhost: example\nport: 80\nflag: "),
        ("report.pdf", documents.pdf(["First page.", "Second page."]), "First page.Second page."),
        ("letter.docx", documents.docx(["Dear reader,", "Regards"], [["k", "v"], ["a", "1"]]),
         "Dear reader,\n| k | v |\n| - | - |\n| a | 1 |\n\nRegards"),
        ("book.xlsx", documents.xlsx({"Q1": [["item", "qty"], ["pens", 3], [None, None], ["ink", 1.5]],
                                      "Empty": []}),
         "| item | qty |\n| ---- | --- |\n| pens | 3 |\n| ink | 1.5 |\n\n"),
    ]  # fmt: skip
    for name, content, expected in cases:
        assert extract(write(name, content))["text"] == expected, name


def test_encodings_by_bom_then_utf8_then_windows_1252(write: Any) -> None:
    assert extract(write("a.txt", "\ufeffBOM text".encode()))["text"] == "BOM text"
    assert extract(write("b.txt", "wide".encode("utf-16")))["text"] == "wide"
    assert extract(write("c.txt", "café".encode("cp1252")))["text"] == "café"


def test_a_list_gives_a_list_and_an_empty_list_an_empty_list(write: Any) -> None:
    files = [write("one.txt", "1"), None, write("two.md", "2")]
    out = extract(files)
    assert out["text"] == ["1", "2"]
    assert [d["filename"] for d in out["documents"]] == ["one.txt", "two.md"]
    assert extract([])["text"] == []


def test_the_mime_type_decides_when_there_is_no_extension(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_text('{"k": 1}')
    found = from_path(path)
    as_json = File(**{**_fields(found), "extension": "", "mime_type": "application/json"})
    assert extract(as_json)["text"] == '{\n  "k": 1\n}'
    unknown = File(**{**_fields(found), "extension": "", "mime_type": "application/x-thing"})
    with pytest.raises(DocumentError, match="application/x-thing files are not supported"):
        extract(unknown)


def _fields(file: File) -> dict[str, Any]:
    return {name: getattr(file, name) for name in File.__slots__ if not name.startswith("__")}


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("slides.pptx", b"PK\x03\x04", "slides.pptx: .pptx files are not supported"),
        ("old.doc", b"\xd0\xcf\x11\xe0", "old.doc: .doc files are not supported"),
        ("broken.pdf", b"%PDF-1.4 this is not a pdf", "broken.pdf cannot be read as PDF"),
        ("broken.docx", b"not a zip at all", "broken.docx cannot be read as DOCX"),
        ("broken.xlsx", b"PK\x03\x04 truncated", "broken.xlsx cannot be read as XLSX"),
        ("bad.json", b"{nope", "bad.json cannot be read as JSON"),
        ("locked.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600), "locked.docx is an encrypted DOCX"),
    ],
)  # fmt: skip
def test_unsupported_corrupt_and_encrypted_files_are_named(
    write: Any, name: str, content: bytes, fragment: str
) -> None:
    with pytest.raises(DocumentError, match=fragment):
        extract(write(name, content))


def test_an_encrypted_pdf_is_named_and_one_with_an_empty_password_opens(write: Any) -> None:
    with pytest.raises(DocumentError, match="secret.pdf is an encrypted PDF file"):
        extract(write("secret.pdf", documents.pdf(["hidden"], password="pw")))
    assert extract(write("open.pdf", documents.pdf(["shown"], password="")))["text"] == "shown"


def test_limits_name_the_file_and_the_setting(write: Any) -> None:
    three = write("three.pdf", documents.pdf(["a", "b", "c"]))
    with pytest.raises(DocumentError, match="three.pdf has 3 pages, more than the limit of 2"):
        extract(three, document_extractor={"max_pages": 2})
    with pytest.raises(FileError, match="big.txt is 101 bytes, more than the limit of 100"):
        extract(write("big.txt", "x" * 101), document_extractor={"max_file_bytes": 100})
    with pytest.raises(DocumentError, match="longer than 10 characters"):
        extract(write("long.txt", "y" * 11), document_extractor={"max_text_chars": 10})
    with pytest.raises(DocumentError, match="long.pdf is longer than 10 characters|text of long"):
        extract(write("long.pdf", documents.pdf(["0123456", "789abc"])),
                document_extractor={"max_text_chars": 10})  # fmt: skip


def test_an_archive_that_unpacks_past_the_limit_is_refused_before_parsing(write: Any) -> None:
    bomb = write("bomb.docx", documents.zip_bomb(8 * 1024 * 1024))
    assert bomb.size < 100_000
    with pytest.raises(DocumentError, match="bomb.docx unpacks to more than 4194304 bytes"):
        extract(bomb, document_extractor={"max_unzipped_bytes": 4 * 1024 * 1024})
    sheet = write("bomb.xlsx", documents.zip_bomb(8 * 1024 * 1024, "xl/worksheets/sheet1.xml"))
    with pytest.raises(DocumentError, match="bomb.xlsx unpacks"):
        extract(sheet, document_extractor={"max_unzipped_bytes": 4 * 1024 * 1024})


def test_a_missing_variable_or_a_value_that_is_not_a_file_is_an_error() -> None:
    with pytest.raises(DocumentError, match="file variable start.doc is not set"):
        extract(None)
    with pytest.raises(DocumentError, match="start.doc is not a file or a list of files"):
        extract("just text")
    with pytest.raises(DocumentError, match="not a file"):
        extract(["text", 3])


@pytest.fixture
def target() -> Iterator[HttpTarget]:
    with HttpTarget() as server:
        yield server


def test_remote_files_are_fetched_under_the_network_policy(target: HttpTarget) -> None:
    target.documents["notes.csv"] = ("text/csv", b"a,b\n1,2\n")
    remote = from_remote_url(f"{target.url}/docs/notes.csv")
    with pytest.raises(AddressRefusedError, match="loopback"):
        extract(remote)  # the default policy refuses loopback, as for http-request
    allowed = {"http_request": {"allow": ["127.0.0.1"]}}
    assert extract(remote, **allowed)["text"] == "| a | b |\n| - | - |\n| 1 | 2 |\n"
    missing = from_remote_url(f"{target.url}/docs/gone.txt")
    with pytest.raises(FileError, match="cannot fetch gone.txt: status 404"):
        extract(missing, **allowed)
    target.documents["huge.txt"] = ("text/plain", b"z" * 2000)
    with pytest.raises(Exception, match="limit of 1000 bytes"):
        extract(from_remote_url(f"{target.url}/docs/huge.txt"),
                **allowed, document_extractor={"max_file_bytes": 1000})  # fmt: skip
    assert json.loads(json.dumps(extract(remote, **allowed)["documents"]))[0]["filename"] == (
        "notes.csv"
    )


def test_reading_stops_at_the_text_limit(write: Any, monkeypatch: Any) -> None:
    """A long document is not read to its end once its text is over the limit."""
    import pypdf

    read: list[int] = []
    real = pypdf.PageObject.extract_text

    def counted(page: Any, *args: Any, **kwargs: Any) -> str:
        read.append(1)
        return real(page, *args, **kwargs)

    monkeypatch.setattr(pypdf.PageObject, "extract_text", counted)
    long = write("long.pdf", documents.pdf(["0123456789"] * 40))
    with pytest.raises(DocumentError, match="long.pdf is longer than 15 characters"):
        extract(long, document_extractor={"max_text_chars": 15})
    assert len(read) == 2
