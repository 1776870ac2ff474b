"""The `document_extractor` section: how much a document-extractor node reads.

    document_extractor:
      max_file_bytes: 15728640        # Dify's document upload limit, 15 MiB
      max_pages: 500                  # PDF pages
      max_text_chars: 10000000        # the text of one file
      max_unzipped_bytes: 268435456   # a DOCX or XLSX unpacked (zip bombs stop here)

A file over a limit is an error naming the file and the limit, never a
silently shortened text.
"""

from __future__ import annotations

from firstgate.common.dsl import SettingsModel
from firstgate.nodes.document_extractor.text import Limits
from pydantic import Field

_DEFAULTS = Limits()


class DocumentExtractorSettings(SettingsModel):
    max_file_bytes: int = Field(default=15 * 1024 * 1024, ge=1)  # Dify's document upload limit
    max_pages: int = Field(default=_DEFAULTS.max_pages, ge=1)
    max_text_chars: int = Field(default=_DEFAULTS.max_chars, ge=1)
    max_unzipped_bytes: int = Field(default=_DEFAULTS.max_unzipped_bytes, ge=1)

    def limits(self) -> Limits:
        return Limits(
            max_pages=self.max_pages,
            max_chars=self.max_text_chars,
            max_unzipped_bytes=self.max_unzipped_bytes,
        )
