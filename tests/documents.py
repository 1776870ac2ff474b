"""Test documents made on the spot: a PDF written by hand (then encrypted with
pypdf when asked), a DOCX by python-docx, an XLSX by openpyxl, and archives
that unpack to far more than they weigh."""

from __future__ import annotations

import io
import zipfile


def pdf(pages: list[str], *, password: str | None = None) -> bytes:
    """A PDF whose pages each show one line of Helvetica text."""
    objects: list[bytes] = []  # object n is objects[n - 1]
    font_no, pages_no = 3, 2
    page_numbers = []
    for text in pages:
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode()
        content_no = 4 + 2 * len(page_numbers)
        page_numbers.append(content_no + 1)
        objects.extend(
            [
                b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (pages_no, content_no, font_no),
            ]
        )
    kids = " ".join(f"{n} 0 R" for n in page_numbers).encode()
    head = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(page_numbers)),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    body = io.BytesIO()
    # The binary comment line real PDF writers add (so tools treat the file as binary).
    body.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, obj in enumerate(head + objects, start=1):
        offsets.append(body.tell())
        body.write(b"%d 0 obj\n%s\nendobj\n" % (number, obj))
    xref = body.tell()
    body.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(offsets) + 1))
    for offset in offsets:
        body.write(b"%010d 00000 n \n" % offset)
    body.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(offsets) + 1, xref)
    )
    data = body.getvalue()
    if password is None:
        return data
    import pypdf

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=password, owner_password=password + "-owner")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx(paragraphs: list[str], table: list[list[str]] | None = None) -> bytes:
    import docx as python_docx

    document = python_docx.Document()
    for text in paragraphs[:1]:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    for text in paragraphs[1:]:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx(sheets: dict[str, list[list[object]]]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def zip_bomb(unpacked_bytes: int, member: str = "word/document.xml") -> bytes:
    """A zip archive whose one member unpacks to `unpacked_bytes` of zeros."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open(member, "w") as handle:
            chunk = bytes(1024 * 1024)
            left = unpacked_bytes
            while left > 0:
                handle.write(chunk[: min(left, len(chunk))])
                left -= len(chunk)
    return out.getvalue()
