"""Message keys in code and in en-US agree in both directions.

1. Every string literal in the runtime's Python code that looks like a message
   key exists in en-US (a typo would otherwise surface only as a KeyError on
   the error path, the least-tested path there is).
2. Every en-US key is used by code, or is listed in `EDITOR_ONLY` (strings the
   visual editor shows but the runtime never renders), so dead strings do not
   pile up in 23 locales.

What counts as a use, found by parsing the code with `ast`:

- a plain string literal shaped like a key: `"errors.idleTimeout"`;
- a literal prefix ending in a dot, at least one level below the namespace,
  e.g. `"errors.invoke." + kind` or the constant head of
  `f"errors.invoke.{kind}"`: every en-US key under that prefix counts as
  used, and at least one must exist. A bare namespace such as `"dsl."` is a
  test like `kind.startswith("dsl.")`, not a key, and marks nothing used.

A key-shaped literal that en-US lacks is reported as missing unless it names
a module of this repository or a file (`"nodes.llm"`, `"cli.py"`); en-US keys
that merely look like file names (`dsl.file.yaml`) are still keys.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED_DIRS = (
    "runtime",
    "nodes",
    "plugin_daemon_client",
    "sandbox",
    "connectors",
    "common",
    "locales",
    "store",
    "serve",
)
KEY_PREFIXES = ("errors.", "watchdog.", "dsl.", "cli.", "nodes.", "serve.", "console.")
KEY_SHAPE = re.compile(
    r"(?:errors|watchdog|dsl|cli|nodes|serve|console)(?:\.[A-Za-z][A-Za-z0-9_]*)+"
)
# A key prefix names at least one level below the namespace ("errors.invoke."):
# a bare "dsl." is a namespace test (`kind.startswith("dsl.")`), not a key.
PREFIX_SHAPE = re.compile(r"(?:errors|watchdog|dsl|cli|nodes)(?:\.[A-Za-z][A-Za-z0-9_]*)+\.")
FILE_SUFFIXES = (".py", ".json", ".yml", ".yaml", ".md", ".txt", ".toml", ".gguf")

# Settings and labels of the visual editor: shipped for the editor's locales,
# never rendered by the runtime itself.
EDITOR_ONLY: frozenset[str] = frozenset(
    {
        "nodes.common.retry.retry",
        "nodes.common.retry.retryOnFailure",
        "nodes.common.retry.maxRetries",
        "nodes.common.retry.retryInterval",
        "nodes.common.retry.retryTimes",
        "nodes.common.retry.times",
        "nodes.common.retry.ms",
        "nodes.common.retry.retrying",
        "nodes.common.retry.retrySuccessful",
        "nodes.common.retry.retryFailed",
        "nodes.common.retry.retryFailedTimes",
        "nodes.common.errorHandle.title",
        "nodes.common.errorHandle.tip",
        "nodes.common.errorHandle.none.title",
        "nodes.common.errorHandle.none.desc",
        "nodes.common.errorHandle.defaultValue.title",
        "nodes.common.errorHandle.defaultValue.desc",
        "nodes.common.errorHandle.failBranch.title",
        "nodes.common.errorHandle.failBranch.desc",
        "nodes.common.errorHandle.partialSucceeded.tip",
        "nodes.llm.gate.firstTokenTimeout.label",
        "nodes.llm.gate.firstTokenTimeout.tip",
        "nodes.llm.gate.firstTokenTimeout.unit",
        "nodes.llm.gate.idleTimeout.label",
        "nodes.llm.gate.idleTimeout.tip",
        "nodes.llm.gate.idleTimeout.unit",
        "nodes.llm.gate.streamTotalTimeout.label",
        "nodes.llm.gate.streamTotalTimeout.tip",
        "nodes.llm.gate.streamTotalTimeout.unit",
        "nodes.llm.gate.livenessProbe.label",
        "nodes.llm.gate.livenessProbe.tip",
        "nodes.llm.gate.fallbackBudget.label",
        "nodes.llm.gate.fallbackBudget.tip",
        "nodes.llm.gate.fallbackBudget.unit",
    }
)


def english_keys() -> list[str]:
    with (REPO / "locales" / "en-US.json").open(encoding="utf-8") as fh:
        return list(json.load(fh))


def python_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED_DIRS:
        files += sorted((REPO / name).rglob("*.py"))
    return [f for f in files if "__pycache__" not in f.parts]


def names_repo_path(literal: str) -> bool:
    """True for `nodes.llm` (a module) or `cli.py` (a file), which are not keys."""
    if literal.endswith(FILE_SUFFIXES):
        return True
    as_path = REPO.joinpath(*literal.split("."))
    return as_path.with_suffix(".py").exists() or as_path.is_dir()


def string_constants(tree: ast.AST) -> Iterator[tuple[int, str, bool]]:
    """(line, text, is_prefix) for each literal and each f-string's constant head."""
    heads: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                heads.add(id(first))
                yield node.lineno, first.value, True
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in heads:
            yield node.lineno, node.value, False


def key_references() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Exact keys and key prefixes referenced by code, each with where they occur."""
    exact: dict[str, list[str]] = {}
    prefixes: dict[str, list[str]] = {}
    for path in python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = path.relative_to(REPO)
        for line, text, is_prefix in string_constants(tree):
            if not text.startswith(KEY_PREFIXES):
                continue
            where = f"{rel}:{line}"
            if PREFIX_SHAPE.fullmatch(text):
                prefixes.setdefault(text, []).append(where)
            elif is_prefix and PREFIX_SHAPE.fullmatch(text[: text.rfind(".") + 1]):
                # f"errors.invoke.rate{x}" -> the part up to the last dot.
                prefixes.setdefault(text[: text.rfind(".") + 1], []).append(where)
            elif KEY_SHAPE.fullmatch(text):
                exact.setdefault(text, []).append(where)
    return exact, prefixes


def used_keys(english: list[str]) -> set[str]:
    exact, prefixes = key_references()
    used = {k for k in exact if k in english}
    for prefix in prefixes:
        used |= {k for k in english if k.startswith(prefix)}
    return used


def test_scanner_finds_the_shapes_it_claims() -> None:
    source = (
        "import x\n"
        "A = 'errors.idleTimeout'\n"
        "B = 'errors.invoke.' + kind\n"
        "C = f'errors.firstTokenTimeout.{which}'\n"
        "D = 'nodes.llm'\n"
        "E = 'not.a.key'\n"
        "F = 'cli.py'\n"
    )
    found = list(string_constants(ast.parse(source)))
    texts = {text for _, text, _ in found}
    assert {"errors.idleTimeout", "errors.invoke.", "errors.firstTokenTimeout."} <= texts
    assert KEY_SHAPE.fullmatch("errors.idleTimeout")
    assert PREFIX_SHAPE.fullmatch("errors.invoke.")
    assert not PREFIX_SHAPE.fullmatch("dsl.")  # a namespace test, not a key prefix
    assert names_repo_path("cli.py")
    assert names_repo_path("nodes")  # the package directory


def test_editor_only_keys_exist_in_english() -> None:
    english = set(english_keys())
    stale = sorted(EDITOR_ONLY - english)
    assert not stale, f"EDITOR_ONLY lists keys that en-US no longer has: {stale}"


def test_every_key_referenced_in_code_exists_in_english() -> None:
    english = english_keys()
    exact, prefixes = key_references()
    missing = {k: v for k, v in exact.items() if k not in english and not names_repo_path(k)}
    empty_prefixes = {
        p: v for p, v in prefixes.items() if not any(k.startswith(p) for k in english)
    }
    assert not missing, "keys used in code but missing from en-US:\n" + "\n".join(
        f"  {k}  ({', '.join(v)})" for k, v in sorted(missing.items())
    )
    assert not empty_prefixes, "key prefixes with no en-US key:\n" + "\n".join(
        f"  {p}  ({', '.join(v)})" for p, v in sorted(empty_prefixes.items())
    )


def test_every_english_key_is_used_or_editor_only() -> None:
    english = english_keys()
    used = used_keys(english)
    unused = [k for k in english if k not in used and k not in EDITOR_ONLY]
    assert not unused, (
        "en-US keys neither used by code nor listed in EDITOR_ONLY "
        "(use them, delete them from every locale, or list them):\n  " + "\n  ".join(unused)
    )


@pytest.mark.parametrize("key", sorted(EDITOR_ONLY))
def test_editor_only_keys_are_editor_settings(key: str) -> None:
    assert key.startswith("nodes."), key
