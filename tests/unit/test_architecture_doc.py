"""docs/architecture.md stays true: every module and folder it names exists, and
the README points to it (not to a file outside the project)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
# A repository path in backticks: `runtime/execution/engine.py`, `plugin_daemon_client/protocols/`.
PATH = re.compile(r"`([a-z_]+/(?:[A-Za-z0-9_.<>-]+/)*(?:[A-Za-z0-9_<>-]+\.py)?)`")


def named_paths(text: str) -> list[str]:
    return [p for p in PATH.findall(text) if "<" not in p]  # `<section>.py` is a pattern


def test_every_module_the_doc_names_exists() -> None:
    names = named_paths(DOC.read_text(encoding="utf-8"))
    assert len(names) > 30  # the doc maps the code; an empty match would prove nothing
    missing = [name for name in names if not (ROOT / name).exists()]
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"


def test_the_check_sees_a_missing_module() -> None:
    assert named_paths("see `runtime/nowhere.py` and `nodes/`") == ["runtime/nowhere.py", "nodes/"]
    assert not (ROOT / "runtime/nowhere.py").exists()


def test_readme_links_the_doc() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/architecture.md" in readme
    assert "../shared" not in readme
