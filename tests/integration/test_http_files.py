"""Files through the http-request node, against a real loopback server: a
binary response becomes a file object (written whole, within the binary
cap), and file variables travel as a `binary` body or form-data parts. The
files come from an upstream http-request node, as they would in a flow."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from firstgate.runtime.execution import events as ev

from tests import documents
from tests.connect_support import chain_flow, node_end, run_events, settings
from tests.fakes.http_target import HttpTarget

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


@pytest.fixture
def target() -> Iterator[HttpTarget]:
    with HttpTarget() as server:
        yield server


def routes(tmp_path: Path, **http: Any) -> Any:
    return settings(
        http_request={"allow": ["127.0.0.1"], **http}, files={"dir": str(tmp_path / "files")}
    )


def get(url: str) -> dict[str, Any]:
    return {"method": "get", "url": url, "headers": "", "params": ""}


def final(events: list[ev.Event]) -> Any:
    return events[-1]


def test_a_binary_response_becomes_a_file(target: HttpTarget, tmp_path: Path) -> None:
    document = chain_flow(
        [("dl", "http-request", get(f"{target.url}/file"))],
        {"body": ["dl", "body"], "files": ["dl", "files"], "status": ["dl", "status_code"]},
    )
    out = final(run_events(document, routes(tmp_path))).outputs
    assert out["body"] == "" and out["status"] == 200
    [file] = out["files"]
    assert file["filename"] == "pixel.png" and file["mime_type"] == "image/png"
    assert file["type"] == "image" and file["transfer_method"] == "tool_file"
    assert file["size"] == len(PNG)
    assert (tmp_path / "files" / f"{file['related_id']}.png").read_bytes() == PNG


def test_a_file_without_a_name_is_named_by_type(target: HttpTarget, tmp_path: Path) -> None:
    target.documents["report"] = ("application/pdf", documents.pdf(["x"]))
    document = chain_flow(
        [("dl", "http-request", get(f"{target.url}/docs/report"))], {"files": ["dl", "files"]}
    )
    [file] = final(run_events(document, routes(tmp_path))).outputs["files"]
    assert file["extension"] == ".pdf" and file["filename"].endswith(".pdf")
    assert file["type"] == "document"


def test_office_documents_are_files_and_xml_feeds_are_text(
    target: HttpTarget, tmp_path: Path
) -> None:
    # Dify matches "xml" anywhere in the type, which makes every Office document
    # text; here whole name parts decide (see connectors.guarded_http).
    target.documents["sheet"] = (
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        documents.xlsx({"S": [["a"], ["1"]]}),
    )
    target.documents["feed"] = ("application/rss+xml", b"<rss><channel/></rss>")
    document = chain_flow(
        [
            ("sheet", "http-request", get(f"{target.url}/docs/sheet")),
            ("feed", "http-request", get(f"{target.url}/docs/feed")),
        ],
        {"files": ["sheet", "files"], "feed": ["feed", "body"], "none": ["feed", "files"]},
    )
    out = final(run_events(document, routes(tmp_path))).outputs
    assert [f["extension"] for f in out["files"]] == [".xlsx"]
    assert out["feed"] == "<rss><channel/></rss>" and out["none"] == []


def test_a_binary_response_over_the_cap_is_an_error(target: HttpTarget, tmp_path: Path) -> None:
    document = chain_flow(
        [("dl", "http-request", get(f"{target.url}/file"))], {"files": ["dl", "files"]}
    )
    events = run_events(document, routes(tmp_path, max_binary_bytes=100))
    assert "binary response body is larger than the limit of 100 bytes" in (
        final(events).error_message
    )
    assert not (tmp_path / "files").exists() or not any((tmp_path / "files").iterdir())


def test_a_file_variable_as_a_binary_body(target: HttpTarget, tmp_path: Path) -> None:
    upload = {
        "method": "post",
        "url": f"{target.url}/echo",
        "headers": "",
        "params": "",
        "body": {"type": "binary", "data": [{"type": "file", "file": ["dl", "files"]}]},
    }
    document = chain_flow(
        [("dl", "http-request", get(f"{target.url}/file")), ("up", "http-request", upload)],
        {"status": ["up", "status_code"]},
    )
    events = run_events(document, routes(tmp_path))
    assert final(events).outputs == {"status": 200}
    sent = target.requests[-1]
    assert sent["method"] == "POST" and sent["body"] == PNG
    assert sent["headers"]["content-type"] == "application/octet-stream"
    assert "<264 bytes>" in node_end(events, "up").process_data["request"]


def test_file_fields_in_a_form(target: HttpTarget, tmp_path: Path) -> None:
    upload = {
        "method": "post",
        "url": f"{target.url}/echo",
        "headers": "",
        "params": "",
        "body": {
            "type": "form-data",
            "data": [
                {"type": "text", "key": "caption", "value": "a pixel"},
                {"type": "file", "key": "picture", "file": ["dl", "files"]},
                {"type": "file", "key": "nothing", "file": ["start", "maybe"]},
            ],
        },
    }
    document = chain_flow(
        [("dl", "http-request", get(f"{target.url}/file")), ("up", "http-request", upload)],
        {"status": ["up", "status_code"]},
        start_variables=[{"variable": "maybe", "type": "text-input", "label": "maybe"}],
    )
    events = run_events(document, routes(tmp_path))
    assert final(events).outputs == {"status": 200}
    sent = target.requests[-1]
    assert sent["headers"]["content-type"].startswith("multipart/form-data; boundary=")
    body = sent["body"]
    assert b'name="caption"\r\n\r\na pixel\r\n' in body
    assert b'name="picture"; filename="pixel.png"\r\nContent-Type: image/png\r\n\r\n' + PNG in body
    assert b'name="nothing"' not in body
    assert "picture=@pixel.png <264 bytes>" in node_end(events, "up").process_data["request"]


def test_a_binary_body_without_its_file_is_an_error(target: HttpTarget, tmp_path: Path) -> None:
    upload = {
        "method": "post",
        "url": f"{target.url}/echo",
        "body": {"type": "binary", "data": [{"type": "file", "file": ["dl", "files"]}]},
    }
    document = chain_flow(
        [("dl", "http-request", get(f"{target.url}/json")), ("up", "http-request", upload)],
        {"status": ["up", "status_code"]},
    )
    events = run_events(document, routes(tmp_path))
    assert "the binary body's file variable dl.files is not set" in final(events).error_message


def test_a_downloaded_document_through_the_extractor(target: HttpTarget, tmp_path: Path) -> None:
    target.documents["report.pdf"] = ("application/pdf", documents.pdf(["Quarterly numbers"]))
    document = chain_flow(
        [
            ("dl", "http-request", get(f"{target.url}/docs/report.pdf")),
            ("read", "document-extractor", {"variable_selector": ["dl", "files"]}),
        ],
        {"text": ["read", "text"]},
    )
    assert final(run_events(document, routes(tmp_path))).outputs == {"text": ["Quarterly numbers"]}
