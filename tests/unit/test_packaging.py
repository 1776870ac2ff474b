"""One import package: every folder of the code is installed as `firstgate.<folder>`,
and none under its bare name (a library embedded in other programs must not own
`import store` or `import runtime` in their process)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_INSTALLED = {"firstgate", "tests", "bench"}


def setup_folders() -> list[str]:
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FOLDERS":
            return list(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no FOLDERS")


def code_folders() -> list[str]:
    return sorted(
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").is_file() and p.name not in NOT_INSTALLED
    )


def test_every_code_folder_is_installed_under_the_namespace() -> None:
    assert sorted(setup_folders()) == code_folders()


def test_the_installed_environment_has_only_the_namespace(tmp_path: Path) -> None:
    # From a folder outside the checkout, as a program that embeds firstgate runs.
    script = (
        "import importlib, json\n"
        "found = {}\n"
        f"for name in {code_folders()!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "        found[name] = 'bare'\n"
        "    except ModuleNotFoundError:\n"
        "        importlib.import_module('firstgate.' + name)\n"
        "        found[name] = 'namespaced'\n"
        "print(json.dumps(found))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found = ast.literal_eval(done.stdout.strip())
    assert found == dict.fromkeys(code_folders(), "namespaced")


def test_the_top_level_names_load_lazily(tmp_path: Path) -> None:
    script = (
        "import sys, firstgate\n"
        "assert 'firstgate.runtime' not in sys.modules\n"
        "from firstgate import load_workflow, open_store\n"
        "print(load_workflow.__module__, open_store.__module__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["firstgate.runtime.workflow", "firstgate.store"]
