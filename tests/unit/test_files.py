"""Dify's file object: built from real files, checked against an input's rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from firstgate.common import files
from firstgate.common.files import File, FileError, FileRules, FileType, TransferMethod


def _write(tmp_path: Path, name: str, size: int) -> Path:
    path = tmp_path / name
    path.write_bytes(b"x" * size)
    return path


def test_a_local_file_becomes_a_local_file_upload(tmp_path: Path) -> None:
    found = files.from_path(_write(tmp_path, "Report.PDF", 1234))
    assert found.type is FileType.DOCUMENT
    assert found.transfer_method is TransferMethod.LOCAL_FILE
    assert (found.filename, found.extension, found.size) == ("Report.PDF", ".pdf", 1234)
    assert found.mime_type == "application/pdf"
    assert found.related_id
    wire = found.to_dict()
    assert wire["dify_model_identity"] == "__dify__file__"
    assert set(wire) == {
        "dify_model_identity", "id", "tenant_id", "type", "transfer_method", "remote_url",
        "related_id", "filename", "extension", "mime_type", "size", "url",
    }  # fmt: skip
    assert wire["url"].startswith("file://") and "path" not in wire


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("a.png", FileType.IMAGE),
        ("a.JPEG", FileType.IMAGE),
        ("a.mp3", FileType.AUDIO),
        ("a.webm", FileType.VIDEO),
        ("a.md", FileType.DOCUMENT),
        ("a.docx", FileType.DOCUMENT),
        ("a.bin", FileType.CUSTOM),
        ("noext", FileType.CUSTOM),
    ],
)
def test_the_extension_decides_the_type(tmp_path: Path, name: str, kind: FileType) -> None:
    assert files.from_path(_write(tmp_path, name, 1)).type is kind


def test_missing_and_directory_paths_are_errors_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileError) as missing:
        files.from_path(tmp_path / "nope.txt")
    assert missing.value.message_key == "errors.file.missing"
    assert "nope.txt" in str(missing.value)
    with pytest.raises(FileError) as directory:
        files.from_path(tmp_path)
    assert directory.value.message_key == "errors.file.missing"


def test_a_remote_url_is_not_fetched() -> None:
    found = files.from_reference("@https://example.com/docs/a%20b.pdf?x=1")
    assert found.transfer_method is TransferMethod.REMOTE_URL
    assert (found.filename, found.type, found.size) == ("a b.pdf", FileType.DOCUMENT, -1)
    assert found.url == "https://example.com/docs/a%20b.pdf?x=1"
    with pytest.raises(FileError):
        files.from_remote_url("ftp://example.com/a.pdf")


def test_rules_refuse_a_type_the_input_does_not_take(tmp_path: Path) -> None:
    rules = FileRules.from_config(types=["image"])
    rules.check(files.from_path(_write(tmp_path, "a.png", 10)))
    with pytest.raises(FileError) as refused:
        rules.check(files.from_path(_write(tmp_path, "a.pdf", 10)))
    assert refused.value.message_key == "errors.file.typeNotAllowed"


def test_custom_type_takes_the_listed_extensions_only(tmp_path: Path) -> None:
    rules = FileRules.from_config(types=["custom"], extensions=[".BIN", "dat"])
    rules.check(files.from_path(_write(tmp_path, "a.bin", 1)))
    rules.check(files.from_path(_write(tmp_path, "a.dat", 1)))
    with pytest.raises(FileError):
        rules.check(files.from_path(_write(tmp_path, "a.exe", 1)))


def test_size_limits_follow_the_apps_upload_config(tmp_path: Path) -> None:
    big = files.from_path(_write(tmp_path, "a.png", 2 * files.MB))
    FileRules.from_config().check(big)  # Dify's default image limit is 10 MB
    with pytest.raises(FileError) as refused:
        FileRules.from_config(upload_config={"image_file_size_limit": 1}).check(big)
    assert refused.value.message_key == "errors.file.tooLarge"
    assert refused.value.params["limit"] == files.MB


def test_upload_methods_are_enforced(tmp_path: Path) -> None:
    rules = FileRules.from_config(methods=["remote_url"])
    rules.check(files.from_remote_url("https://example.com/a.png"))
    with pytest.raises(FileError) as refused:
        rules.check(files.from_path(_write(tmp_path, "a.png", 1)))
    assert refused.value.message_key == "errors.file.methodNotAllowed"


def test_read_bytes_never_reads_past_the_cap(tmp_path: Path) -> None:
    found = files.from_path(_write(tmp_path, "a.txt", 100))
    assert found.read_bytes(100) == b"x" * 100
    with pytest.raises(FileError) as refused:
        found.read_bytes(99)
    assert refused.value.message_key == "errors.file.tooLarge"


def test_attributes_and_markdown() -> None:
    image = File(FileType.IMAGE, TransferMethod.REMOTE_URL, "cat.png", ".png", "image/png", 5,
                 remote_url="https://h/cat.png")  # fmt: skip
    assert image.attribute("name") == "cat.png"
    assert image.attribute("extension") == ".png"
    assert image.attribute("nonsense") is None
    assert image.markdown == "![cat.png](https://h/cat.png)"
    doc = files.from_remote_url("https://h/a.pdf")
    assert doc.markdown == "[a.pdf](https://h/a.pdf)"
