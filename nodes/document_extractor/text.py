"""Text from a document's bytes, the way Dify's document extractor reads each
format: plain text, Markdown and HTML as text (HTML is not stripped, as in
Dify), CSV and XLSX as Markdown tables, JSON pretty-printed, PDF page by
page (`pypdf`), DOCX paragraphs and tables in document order
(`python-docx`), Java properties as `key: value` lines.

The format is chosen by the file's extension, else by its MIME type. Every
failure is a `DocumentError` naming the file: an unsupported type, an
encrypted or corrupt file, more pages than allowed, an archive (DOCX, XLSX)
that would expand past the limit, more text than allowed. Nothing here
reads past the limits it is given.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from firstgate.nodes.base import NodeRunError


class DocumentError(NodeRunError):
    """A document cannot be turned into text (the message names the file)."""


@dataclass(frozen=True, slots=True)
class Limits:
    max_pages: int = 500
    max_chars: int = 10_000_000
    # What the members of a DOCX or XLSX (zip archives) may add up to, unpacked.
    max_unzipped_bytes: int = 256 * 1024 * 1024


_PLAIN_EXTENSIONS = frozenset(
    {
        ".txt", ".markdown", ".md", ".mdx", ".html", ".htm", ".xml", ".c", ".h", ".cpp",
        ".hpp", ".cc", ".cxx", ".c++", ".py", ".js", ".ts", ".jsx", ".tsx", ".java", ".php",
        ".rb", ".go", ".rs", ".swift", ".kt", ".scala", ".sh", ".bash", ".bat", ".ps1",
        ".sql", ".r", ".m", ".pl", ".lua", ".vim", ".asm", ".s", ".css", ".scss", ".less",
        ".sass", ".ini", ".cfg", ".conf", ".toml", ".env", ".log", ".vtt", ".yaml", ".yml",
    }
)  # fmt: skip
_PLAIN_MIME = frozenset(
    {"text/plain", "text/html", "text/htm", "text/markdown", "text/xml", "text/yaml"}
)
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # encrypted OOXML, or legacy .doc/.xls


def _decode(data: bytes) -> str:
    """Text from bytes: a BOM decides, else UTF-8, else Windows-1252 (never fails)."""
    for bom, codec in (
        (b"\xef\xbb\xbf", "utf-8-sig"),
        (b"\xff\xfe", "utf-16"),
        (b"\xfe\xff", "utf-16"),
    ):
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return text.replace("\r", "").replace("\n", " ")


def markdown_table(rows: list[list[str]]) -> str:
    """Dify's table: the first row is the header, then a dashed rule per column."""
    if not rows:
        return ""
    header = [_cell(c) for c in rows[0]]
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("-" * len(c) for c in header) + " |",
    ]
    lines.extend("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows[1:])
    return "\n".join(lines) + "\n"


# --- one reader per format ----------------------------------------------------------------


class _Reading:
    """One file being read: its name (for errors) and the limits."""

    def __init__(self, name: str, limits: Limits) -> None:
        self.name = name
        self.limits = limits

    def fail(self, key: str, **params: object) -> DocumentError:
        return DocumentError(key, name=self.name, **params)

    def corrupt(self, kind: str, exc: BaseException) -> DocumentError:
        detail = (str(exc) or type(exc).__name__)[:200]
        return self.fail("errors.document.corrupt", kind=kind, detail=detail)

    def check_archive(self, data: bytes, kind: str) -> None:
        if data.startswith(_OLE_MAGIC):
            raise self.fail("errors.document.encrypted", kind=kind)
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                # Declared sizes bound what zipfile will unpack: summing them is honest.
                unpacked = sum(info.file_size for info in archive.infolist())
        except (zipfile.BadZipFile, ValueError, OSError) as exc:
            raise self.corrupt(kind, exc) from None
        if unpacked > self.limits.max_unzipped_bytes:
            raise self.fail("errors.document.expands", limit=self.limits.max_unzipped_bytes)

    def plain(self, data: bytes) -> str:
        return _decode(data)

    def json(self, data: bytes) -> str:
        try:
            return json.dumps(json.loads(_decode(data)), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError) as exc:
            raise self.corrupt("JSON", exc) from None

    def csv(self, data: bytes) -> str:
        try:
            rows = list(csv.reader(io.StringIO(_decode(data))))
        except csv.Error as exc:
            raise self.corrupt("CSV", exc) from None
        return markdown_table(rows)

    def properties(self, data: bytes) -> str:
        lines = []
        for raw in _decode(data).splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", "!")):
                lines.append(line)
                continue
            sep = "=" if "=" in line else ":"  # Dify's order: `=` first, then `:`
            key, _, value = line.partition(sep)
            lines.append(f"{key.strip()}: {value.strip()}")
        return "\n".join(lines)

    def pdf(self, data: bytes) -> str:
        import pypdf
        from pypdf.errors import PdfReadError

        try:
            reader = pypdf.PdfReader(io.BytesIO(data))
            if reader.is_encrypted and not reader.decrypt(""):
                # An owner password alone (empty user password) still opens.
                raise self.fail("errors.document.encrypted", kind="PDF")
            pages = len(reader.pages)
            if pages > self.limits.max_pages:
                raise self.fail(
                    "errors.document.tooManyPages", pages=pages, limit=self.limits.max_pages
                )
            return self.bounded(page.extract_text() or "" for page in reader.pages)
        except DocumentError:
            raise
        except (PdfReadError, ValueError, KeyError, TypeError, OSError, RecursionError) as exc:
            raise self.corrupt("PDF", exc) from None
        except Exception as exc:  # noqa: BLE001 - pypdf raises many kinds on hostile files
            if "crypt" in type(exc).__name__.lower() or "password" in str(exc).lower():
                raise self.fail("errors.document.encrypted", kind="PDF") from None
            raise self.corrupt("PDF", exc) from None

    def docx(self, data: bytes) -> str:
        self.check_archive(data, "DOCX")
        import docx
        from docx.table import Table
        from docx.text.paragraph import Paragraph

        try:
            document = docx.Document(io.BytesIO(data))
            parts: list[str] = []
            for block in document.element.body.iterchildren():
                tag = block.tag.rsplit("}", 1)[-1]
                if tag == "p":
                    parts.append(Paragraph(block, document).text)
                elif tag == "tbl":
                    table = Table(block, document)
                    rows = [[c.text.replace("\n", "<br>") for c in r.cells] for r in table.rows]
                    if any(cell.strip() for row in rows for cell in row):
                        parts.append(markdown_table(rows))
            return self.bounded(parts, "\n")
        except DocumentError:
            raise
        except Exception as exc:  # noqa: BLE001 - python-docx raises many kinds
            raise self.corrupt("DOCX", exc) from None

    def xlsx(self, data: bytes) -> str:
        self.check_archive(data, "XLSX")
        import openpyxl

        try:
            book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        except Exception as exc:  # noqa: BLE001 - openpyxl raises many kinds
            raise self.corrupt("XLSX", exc) from None
        try:
            tables = []
            for sheet in book.worksheets:
                rows = [
                    ["" if v is None else str(v) for v in row]
                    for row in sheet.iter_rows(values_only=True)
                    if any(v is not None for v in row)
                ]
                if rows:
                    tables.append(markdown_table(rows) + "\n")
            return self.bounded(tables)
        except Exception as exc:  # noqa: BLE001
            raise self.corrupt("XLSX", exc) from None
        finally:
            book.close()

    def bounded(self, parts: Iterable[str], sep: str = "") -> str:
        """Join parts, refusing more text than the limit (checked as it grows)."""
        out: list[str] = []
        size = 0
        for part in parts:
            size += len(part) + len(sep)
            if size > self.limits.max_chars:
                raise self.fail("errors.document.tooMuchText", limit=self.limits.max_chars)
            out.append(part)
        return sep.join(out)


_BY_EXTENSION: dict[str, Callable[[_Reading, bytes], str]] = {
    **dict.fromkeys(_PLAIN_EXTENSIONS, _Reading.plain),
    ".json": _Reading.json,
    ".csv": _Reading.csv,
    ".properties": _Reading.properties,
    ".pdf": _Reading.pdf,
    ".docx": _Reading.docx,
    ".xlsx": _Reading.xlsx,
}
_BY_MIME: dict[str, Callable[[_Reading, bytes], str]] = {
    **dict.fromkeys(_PLAIN_MIME, _Reading.plain),
    "application/json": _Reading.json,
    "text/csv": _Reading.csv,
    "text/properties": _Reading.properties,
    "application/pdf": _Reading.pdf,
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": _Reading.docx,
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": _Reading.xlsx,
}
SUPPORTED = "text, Markdown, HTML, CSV, JSON, PDF, DOCX, XLSX"


def extract_text(data: bytes, *, name: str, extension: str, mime_type: str, limits: Limits) -> str:
    """The text of one document (see the module docstring)."""
    reading = _Reading(name, limits)
    extension = extension.lower()
    if extension:
        reader = _BY_EXTENSION.get(extension)
        kind = extension
    else:
        mime = mime_type.split(";", 1)[0].strip().lower()
        reader = _BY_MIME.get(mime)
        kind = mime or "(unknown)"
    if reader is None:
        raise reading.fail("errors.document.unsupported", kind=kind, supported=SUPPORTED)
    text = reader(reading, data)
    if len(text) > limits.max_chars:
        raise reading.fail("errors.document.tooMuchText", limit=limits.max_chars)
    return text
