"""`firstgate` against hostile or broken files and arguments: exit 2 with a
message that names what was wrong and where, never a traceback, never a
value written out in full."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.yaml_reader import MAX_BYTES, MAX_DEPTH
from tests.integration.test_cli import EXAMPLES, firstgate

CHAT = str(EXAMPLES / "chat.yml")


def assert_clean_exit_2(result: object, *needles: str) -> str:
    stderr = result.stderr  # type: ignore[attr-defined]
    assert result.returncode == 2, (result.returncode, stderr[-2000:])  # type: ignore[attr-defined]
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in stderr, stderr[-2000:]
    return stderr


# --- the models file --------------------------------------------------------------


def test_a_models_file_that_is_not_utf8_is_named_and_located(tmp_path: Path) -> None:
    models = tmp_path / "models.yaml"
    models.write_bytes(b"providers:\n  x: {kind: local}\ndefault: caf\xe9\n")
    stderr = assert_clean_exit_2(
        firstgate("run", CHAT, "--input", "query=hi", "--models", str(models)),
        f"{models} has 1 problem(s):",
        f"{models}, line 3, column 13: the text is not UTF-8",
    )
    assert f"{CHAT} has" not in stderr  # headed with the models file, not the flow


def test_a_models_file_that_is_a_directory(tmp_path: Path) -> None:
    assert_clean_exit_2(
        firstgate("run", CHAT, "--input", "query=hi", "--models", str(tmp_path)),
        f"{tmp_path} has 1 problem(s):",
        f"{tmp_path} is a directory, not a file",
    )


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("providers:\n  x: {kind: nope}\ndefault: x\n", "providers.x.kind"),
        ("- local\n", "does not contain a models file"),
    ],
)
def test_models_file_problems_are_headed_with_its_own_name(
    tmp_path: Path, body: str, needle: str
) -> None:
    models = tmp_path / "models.yaml"
    models.write_text(body, encoding="utf-8")
    assert_clean_exit_2(
        firstgate("run", CHAT, "--input", "query=hi", "--models", str(models)),
        f"{models} has 1 problem(s):",
        needle,
    )


# --- hostile workflow files --------------------------------------------------------


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_small_file_nested_600_deep(tmp_path: Path, command: str) -> None:
    flow = tmp_path / "deep.yml"
    flow.write_text("app: {mode: workflow, name: " + "[" * 600 + "]" * 600 + "}\n")
    assert flow.stat().st_size < 1500
    assert_clean_exit_2(firstgate(command, str(flow)), f"nested more than {MAX_DEPTH} levels deep")


def test_a_file_over_the_size_limit(tmp_path: Path) -> None:
    flow = tmp_path / "big.yml"
    with flow.open("w", encoding="utf-8") as file:
        file.write("app:\n  name: '")
        chunk = "x" * 1_000_000
        for _ in range(50):  # 50 MB
            file.write(chunk)
        file.write("'\n")
    assert_clean_exit_2(
        firstgate("validate", str(flow)), f"is larger than the limit of {MAX_BYTES} bytes"
    )


def test_an_alias_bomb_is_refused_with_a_short_message(tmp_path: Path) -> None:
    levels = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    flow = tmp_path / "bomb.yml"
    flow.write_text(
        "defs:\n  " + "\n  ".join(levels) + "\napp: {mode: workflow, name: *a9}\n",
        encoding="utf-8",
    )
    assert flow.stat().st_size < 1200
    stderr = assert_clean_exit_2(
        firstgate("run", str(flow)), "its aliases would make the document larger"
    )
    assert len(stderr) < 600


def test_duplicate_keys_in_a_workflow_file(tmp_path: Path) -> None:
    text = (EXAMPLES / "chat.yml").read_text(encoding="utf-8")
    flow = tmp_path / "dup.yml"
    flow.write_text(text.replace("kind: app\n", "kind: app\nkind: app\n", 1), encoding="utf-8")
    assert_clean_exit_2(firstgate("validate", str(flow)), 'duplicate key "kind"')
