"""`firstgate index` into a folder that does not exist yet (the README's
`--index kb/handbook.sqlite` on a fresh clone) creates the folder."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_cli import firstgate


def test_the_index_folder_is_created(tmp_path: Path) -> None:
    docs = tmp_path / "handbook"
    docs.mkdir()
    (docs / "returns.md").write_text("# Returns\nA cracked mug is replaced.\n", encoding="utf-8")
    index = tmp_path / "kb" / "new" / "handbook.sqlite"
    done = firstgate("index", str(docs), "--dataset", "a2b3c4", "--index", str(index))
    assert done.returncode == 0, done.stderr
    assert "1 added" in done.stdout
    assert index.is_file()
