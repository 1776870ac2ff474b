"""The embedded knowledge backend: a folder of documents in an SQLite FTS5 index,
ranked by BM25.

`LocalIndex(path).update(folder)` indexes text files (`.txt`, `.md`,
`.markdown`, `.html`, `.htm`, `.csv`, `.json`, `.rst`) incrementally: a file
whose size and modification time are unchanged is skipped, a changed file is
re-chunked, a file that disappeared is dropped. The whole update is one
transaction, so an interrupted run leaves the previous index intact.

Chunks are paragraphs joined up to about `CHUNK_CHARS` characters. BM25 from
FTS5 is unbounded (lower is better); a hit's score is `s / (1 + s)` with
`s = -bm25`, a number in (0, 1) that grows with relevance, so Dify's
`score_threshold` has a meaning here too. Metadata filtering works on each
document's metadata: `path`, `name`, `extension`, `size`, `modified` (Unix
seconds).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from firstgate.connectors.knowledge import KnowledgeError, MetadataCondition, Record, matches

TEXT_EXTENSIONS = frozenset({".txt", ".md", ".markdown", ".html", ".htm", ".csv", ".json", ".rst"})
CHUNK_CHARS = 1000
MAX_FILE_BYTES = 20 * 1024 * 1024
_WORD = re.compile(r"\w+", re.UNICODE)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    metadata TEXT NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks USING fts5(
    content, title, path UNINDEXED, position UNINDEXED, tokenize = 'unicode61'
);
"""


@dataclass(frozen=True, slots=True)
class UpdateReport:
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    chunks: int = 0


def chunk_text(text: str, limit: int = CHUNK_CHARS) -> list[str]:
    """Paragraphs joined up to `limit` characters; a longer paragraph is split."""
    chunks: list[str] = []
    current = ""
    for paragraph in (p.strip() for p in re.split(r"\n\s*\n", text)):
        while len(paragraph) > limit:
            chunks.extend([current] if current else [])
            current = ""
            chunks.append(paragraph[:limit])
            paragraph = paragraph[limit:]
        if not paragraph:
            continue
        if current and len(current) + 2 + len(paragraph) > limit:
            chunks.append(current)
            current = paragraph
        else:
            current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        chunks.append(current)
    return chunks


def fts_query(query: str) -> str:
    """A user's text as an FTS5 query: every word quoted, any word may match."""
    words = dict.fromkeys(w.lower() for w in _WORD.findall(query))
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


class LocalIndex:
    """One SQLite file; safe to share between threads (one connection, one lock)."""

    def __init__(self, path: str | Path, *, create: bool = False) -> None:
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise KnowledgeError(
                "errors.knowledge.noIndex", index=str(self.path), dataset=self.path.stem
            )
        try:
            if create:  # `firstgate index DIR --index kb/handbook.sqlite`: kb/ may be new
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise KnowledgeError(
                "errors.knowledge.badIndex", index=str(self.path), detail=detail
            ) from None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- building -------------------------------------------------------------

    @staticmethod
    def _files(folder: Path) -> Iterator[Path]:
        for root, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                path = Path(root) / name
                if path.suffix.lower() in TEXT_EXTENSIONS and not name.startswith("."):
                    yield path

    def update(self, folder: str | Path) -> UpdateReport:
        folder = Path(folder)
        if not folder.is_dir():
            raise KnowledgeError("errors.knowledge.noFolder", folder=str(folder))
        added = updated = unchanged = chunk_count = 0
        with self._lock:
            known = {
                row[0]: (row[1], row[2])
                for row in self._db.execute("SELECT path, size, mtime_ns FROM documents")
            }
            self._db.execute("BEGIN")
            try:
                seen: set[str] = set()
                for file in self._files(folder):
                    rel = file.relative_to(folder).as_posix()
                    seen.add(rel)
                    stat = file.stat()
                    if known.get(rel) == (stat.st_size, stat.st_mtime_ns):
                        unchanged += 1
                        continue
                    if rel in known:
                        updated += 1
                        self._db.execute("DELETE FROM chunks WHERE path = ?", (rel,))
                    else:
                        added += 1
                    chunk_count += self._add(file, rel, stat)
                gone = set(known) - seen
                for rel in gone:
                    self._db.execute("DELETE FROM chunks WHERE path = ?", (rel,))
                    self._db.execute("DELETE FROM documents WHERE path = ?", (rel,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return UpdateReport(added, updated, len(gone), unchanged, chunk_count)

    def _add(self, file: Path, rel: str, stat: os.stat_result) -> int:
        if stat.st_size > MAX_FILE_BYTES:
            text = ""  # listed (so it is not re-read every time) but not searchable
        else:
            text = file.read_bytes().decode("utf-8", errors="replace")
        metadata = {
            "path": rel,
            "name": file.name,
            "extension": file.suffix.lower(),
            "size": stat.st_size,
            "modified": int(stat.st_mtime),
        }
        self._db.execute(
            "INSERT OR REPLACE INTO documents (path, size, mtime_ns, metadata) VALUES (?, ?, ?, ?)",
            (rel, stat.st_size, stat.st_mtime_ns, json.dumps(metadata)),
        )
        chunks = chunk_text(text)
        self._db.executemany(
            "INSERT INTO chunks (content, title, path, position) VALUES (?, ?, ?, ?)",
            [(chunk, file.name, rel, i) for i, chunk in enumerate(chunks)],
        )
        return len(chunks)

    # --- searching --------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        top_k: int,
        score_threshold: float | None = None,
        condition: MetadataCondition | None = None,
    ) -> list[Record]:
        match = fts_query(query)
        if not match:
            return []
        with self._lock:
            allowed: set[str] | None = None
            if condition is not None and condition.conditions:
                allowed = {
                    path
                    for path, meta in self._db.execute("SELECT path, metadata FROM documents")
                    if matches(condition, json.loads(meta))
                }
                if not allowed:
                    return []
            sql = (
                "SELECT c.content, c.title, c.path, c.position, bm25(chunks) AS rank, d.metadata "
                "FROM chunks c JOIN documents d ON d.path = c.path WHERE chunks MATCH ?"
            )
            params: list[object] = [match]
            if allowed is not None:
                sql += f" AND c.path IN ({','.join('?' * len(allowed))})"
                params.extend(sorted(allowed))
            sql += " ORDER BY rank LIMIT ?"
            params.append(top_k)
            try:
                rows = self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise KnowledgeError(
                    "errors.knowledge.badIndex", index=str(self.path), detail=str(exc)
                ) from None
        records: list[Record] = []
        for content, title, path, position, rank, meta in rows:
            strength = max(0.0, -float(rank))
            score = strength / (1.0 + strength)
            if score_threshold and score < score_threshold:
                continue
            records.append(
                Record(
                    content=content,
                    score=round(score, 6),
                    title=title,
                    document_id=path,
                    metadata={**json.loads(meta), "chunk": position},
                )
            )
        return records
