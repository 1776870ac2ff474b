"""Knowledge retrieval on the embedded index: 10,000 small documents.

Figures: index build time (firstgate's `LocalIndex.update`, files read and
chunked) against a same-run baseline that inserts the same texts straight
into an FTS5 table; query p50/p99 through `LocalIndex.search` (what the node
calls) against the same FTS5 `MATCH ... ORDER BY bm25` query issued raw.

    python -m bench.knowledge [--docs=10000] [--queries=300]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import tempfile
import time
from pathlib import Path

from bench.common import header, line, ms, percentile, ratio

WORDS = (
    "alpha beta gamma delta river mountain cloud engine socket budget token model server "
    "index query retrieval garden window orange purple silver market harbor signal "
    "lantern meadow thunder pepper violin canyon rocket puzzle ticket velvet"
).split()


def make_docs(folder: Path, count: int, rng: random.Random) -> list[str]:
    texts = []
    for i in range(count):
        text = " ".join(rng.choice(WORDS) for _ in range(40)) + f" doc{i}"
        (folder / f"d{i:05d}.txt").write_text(text)
        texts.append(text)
    return texts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    from firstgate.connectors.local_index import LocalIndex, fts_query

    rng = random.Random(7)
    header(f"knowledge: local FTS5 index, {args.docs} documents")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        texts = make_docs(folder, args.docs, rng)

        raw = sqlite3.connect(Path(tmp) / "raw.sqlite", isolation_level=None)
        raw.execute("CREATE VIRTUAL TABLE chunks USING fts5(content, title)")
        started = time.perf_counter()
        raw.execute("BEGIN")
        raw.executemany(
            "INSERT INTO chunks (content, title) VALUES (?, ?)",
            [(t, f"d{i}") for i, t in enumerate(texts)],
        )
        raw.execute("COMMIT")
        raw_build = time.perf_counter() - started

        index = LocalIndex(Path(tmp) / "kb.sqlite", create=True)
        started = time.perf_counter()
        report = index.update(folder)
        build = time.perf_counter() - started
        started = time.perf_counter()
        index.update(folder)
        rebuild = time.perf_counter() - started
        line(f"build: {build:.2f} s ({report.chunks} chunks); raw FTS5 insert {raw_build:.2f} s")
        line(f"build ratio to raw insert: {ratio(build, raw_build)}")
        line(f"incremental update with nothing changed: {rebuild:.2f} s")

        queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(args.queries)]
        ours, base = [], []
        for q in queries:  # alternate, so drift hits both alike
            started = time.perf_counter()
            index.search(q, top_k=4)
            ours.append(time.perf_counter() - started)
            started = time.perf_counter()
            raw.execute(
                "SELECT content, title, bm25(chunks) r FROM chunks WHERE chunks MATCH ? "
                "ORDER BY r LIMIT 4",
                (fts_query(q),),
            ).fetchall()
            base.append(time.perf_counter() - started)
        p50, p99 = percentile(ours, 50), percentile(ours, 99)
        b50, b99 = percentile(base, 50), percentile(base, 99)
        line(f"query p50 {ms(p50)}, p99 {ms(p99)}; raw FTS5 p50 {ms(b50)}, p99 {ms(b99)}")
        line(f"query p50 ratio to raw: {ratio(p50, b50)}, p99 ratio: {ratio(p99, b99)}")
        index.close()
        raw.close()


if __name__ == "__main__":
    main()
