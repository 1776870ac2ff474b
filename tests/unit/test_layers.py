"""The house's layering, read from the source: imports point down, never in a circle.

Type-only imports (under TYPE_CHECKING) count too: a circle through them is
still a circle in the design, and the next runtime import closes it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Top-level packages by floor: a package imports only from lower floors.
# Packages on the same floor never import each other.
FLOORS: dict[str, int] = {
    "bench": 6,
    "serve": 5,
    "runtime": 4,
    "nodes": 3,
    "plugin_daemon_client": 2,
    "connectors": 2,
    "sandbox": 2,
    "store": 2,
    # What every layer shares (cancel, the DSL model base, durations, files,
    # redaction, the socket scope): it imports only locales.
    "common": 1,
    "locales": 0,
}


# The import package every folder is installed under (setup.py); its own
# `__init__` only re-exports, lazily, and sits above every floor.
NAMESPACE = "firstgate"


def first_party_packages() -> list[str]:
    return sorted(
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and (p / "__init__.py").is_file() and p.name != NAMESPACE
    )


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    # bench/ measures from a checkout and is not installed: it keeps its own name.
    return ".".join(parts if parts[0] == "bench" else [NAMESPACE, *parts])


def package_of(module: str) -> str:
    """`firstgate.runtime.execution.engine` -> `runtime`."""
    parts = module.split(".")
    return parts[1] if parts[0] == NAMESPACE else parts[0]


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in FLOORS:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imported(path: Path, name: str, known: dict[str, Path]) -> Iterator[str]:
    """First-party modules that `path` imports, resolved to the module files."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import module` depends on the module; `from pkg import
            # name` on the package that defines the name.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        for target in targets:
            # The longest known module that the dotted name starts with.
            parts = target.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts and ".".join(parts) != name:
                yield ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(path, name, known)) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_every_package_has_a_floor() -> None:
    missing = [p for p in first_party_packages() if p not in FLOORS and p != "tests"]
    assert not missing, f"add {missing} to FLOORS here and to docs/architecture.md"


def test_packages_import_only_downwards() -> None:
    wrong = []
    for name, targets in import_graph().items():
        floor = FLOORS[package_of(name)]
        for target in targets:
            package = package_of(target)
            if package != package_of(name) and FLOORS[package] >= floor:
                wrong.append(f"{name} -> {target}")
    assert not wrong, wrong


def test_no_module_imports_itself_in_a_circle() -> None:
    assert circles(import_graph()) == []


def test_the_circle_check_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_type_only_imports_count(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from firstgate.runtime.workflow import Workflow\n"
    )
    known = {"firstgate.runtime.workflow": ROOT / "runtime" / "workflow.py"}
    found = list(imported(source, "firstgate.runtime.execution.session", known))
    assert found == ["firstgate.runtime.workflow"]


def bare_imports(path: Path) -> Iterator[str]:
    """Imports of a first-party folder by its bare name (`import runtime`), which
    an installed firstgate does not have: only `firstgate.runtime` exists."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        for dotted in names:
            if dotted.split(".")[0] in FLOORS and dotted.split(".")[0] != "bench":
                yield f"{path}:{node.lineno}: {dotted}"


def test_every_import_goes_through_the_namespace() -> None:
    sources = [p for p in ROOT.rglob("*.py") if ".venv" not in p.parts]
    wrong = [hit for path in sources for hit in bare_imports(path)]
    assert not wrong, wrong


def test_the_bare_import_check_sees_one(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import runtime.engine\nfrom store import open_store\nfrom . import x\n")
    assert [hit.split(": ")[1] for hit in bare_imports(source)] == ["runtime.engine", "store"]


# runtime/'s subsystems, top to bottom: the command line; the front door (a
# loaded workflow and the loader, at runtime/'s root); running a workflow;
# routing models; the settings file; reading DSL. Each imports only below it.
RUNTIME_FLOORS: dict[str, int] = {
    "cli": 5,
    "": 4,
    "execution": 3,
    "models": 2,
    "settings": 1,
    "dsl": 0,
}


def runtime_subsystem(module: str) -> str | None:
    """`firstgate.runtime.execution.engine` -> `execution`; a root module -> ``."""
    parts = module.split(".")
    if parts[:2] != [NAMESPACE, "runtime"]:
        return None
    if len(parts) == 2 or parts[2] not in RUNTIME_FLOORS:
        return ""  # runtime/__init__.py, runtime/loader.py, runtime/workflow.py
    return parts[2]


def downward_violations(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for name, targets in graph.items():
        mine = runtime_subsystem(name)
        if mine is None or name == f"{NAMESPACE}.runtime":
            continue
        for target in targets:
            theirs = runtime_subsystem(target)
            if theirs is None or theirs == mine or target == f"{NAMESPACE}.runtime":
                continue
            if RUNTIME_FLOORS[theirs] >= RUNTIME_FLOORS[mine]:
                wrong.append(f"{name} -> {target}")
    return wrong


def test_every_runtime_folder_has_a_floor() -> None:
    folders = {p.name for p in (ROOT / "runtime").iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(RUNTIME_FLOORS) - {""}, "add the folder to RUNTIME_FLOORS"


def test_runtime_subsystems_import_only_downwards() -> None:
    assert downward_violations(import_graph()) == []


def test_the_subsystem_check_sees_an_upward_import() -> None:
    graph = {
        "firstgate.runtime.dsl.graph": {"firstgate.runtime.execution.engine"},
        "firstgate.runtime.execution.engine": {"firstgate.runtime.dsl.graph"},
    }
    assert downward_violations(graph) == [
        "firstgate.runtime.dsl.graph -> firstgate.runtime.execution.engine"
    ]
