"""The one YAML reader: strict, located, bounded in bytes, depth and expanded size.

Every check runs against both event sources (libyaml when PyYAML has it, and
PyYAML's pure-Python parser), since either may be what a user's install has.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.common.dsl import QUOTE_LIMIT, shown
from firstgate.common.yaml_reader import (
    LOADERS,
    MAX_ALIAS_GROWTH,
    MAX_BYTES,
    MAX_DEPTH,
    parse_yaml,
    read_yaml,
    read_yaml_mapping,
)
from firstgate.runtime import DslError, load_workflow

from bench.chain_dsl import chain_yaml

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yml"))


@pytest.fixture(params=LOADERS, ids=[loader.__name__ for loader in LOADERS])
def loader(request: pytest.FixtureRequest) -> type[Any]:
    return request.param


def refusal(text: str | bytes, loader: type[Any], source: str = "flow.yml") -> DslError:
    with pytest.raises(DslError) as info:
        parse_yaml(text, source, loader=loader)
    error = info.value
    assert len(error.problems) == 1
    assert error.source == source
    return error


def located(error: DslError) -> tuple[str, int, int]:
    place = error.problems[0].place
    assert place is not None
    return place.path, place.line, place.column


def test_libyaml_is_used_when_pyyaml_has_it() -> None:
    if yaml.__with_libyaml__:
        assert LOADERS[0] is yaml.CSafeLoader
    assert LOADERS[-1] is yaml.SafeLoader


# --- what loads, loads as PyYAML's safe loader would load it ------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_load_exactly_as_safe_load(path: Path, loader: type[Any]) -> None:
    text = path.read_text(encoding="utf-8")
    assert parse_yaml(text, path, loader=loader) == yaml.safe_load(text)


def test_an_editor_export_loads_exactly_as_safe_load(loader: type[Any]) -> None:
    text = chain_yaml(40)
    assert parse_yaml(text, "chain.yml", loader=loader) == yaml.safe_load(text)


def test_yaml_1_1_scalars_tags_and_merge_keys(loader: type[Any]) -> None:
    text = (
        "a: yes\nb: 0x1F\nc: 1_000\nd: ~\ne: '07'\nf: 2024-01-02\ng: !!str 12\n"
        "base: &base {x: 1, y: 2}\nmerged:\n  <<: *base\n  y: 3\n"
        "shared: [*base, *base]\n"
    )
    assert parse_yaml(text, "f.yml", loader=loader) == yaml.safe_load(text)


def test_merge_keys_merge_as_pyyaml_merges(loader: type[Any]) -> None:
    text = (
        "a: &a {x: 1, y: 1, z: 1}\nb: &b {x: 2, w: 2}\n"
        "one: {<<: *a, y: 3}\n"
        "list: {<<: [*b, *a], z: 4}\n"  # earlier mappings in the list win
        "inline: {<<: {q: 1}, r: 2}\n"
        "quoted: {'<<': 5}\n"  # a quoted << is an ordinary key
    )
    loaded = parse_yaml(text, "f.yml", loader=loader)
    assert loaded == yaml.safe_load(text)
    assert list(loaded["one"]) == list(yaml.safe_load(text)["one"])


def test_byte_order_mark_and_empty_documents(loader: type[Any]) -> None:
    assert parse_yaml(b"\xef\xbb\xbfa: 1\n", "f.yml", loader=loader) == {"a": 1}
    assert parse_yaml("", "f.yml", loader=loader) is None
    assert parse_yaml("# only a comment\n", "f.yml", loader=loader) is None


# --- strictness -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column", "first"),
    [
        ("a: 1\nb: 2\na: 3\n", 3, 1, 1),
        ("{a: 1, b: 2, a: 3}", 1, 14, 1),
        ("outer:\n  x: 1\n  y: 2\n  x: 3\n", 4, 3, 2),
        ("a: 1\n'a': 2\n", 2, 1, 1),  # the same key, quoted
        ("a: &a {x: 1}\nb:\n  <<: *a\n  <<: *a\n", 4, 3, 3),  # two merge keys
        ("1: a\n0x1: b\n", 2, 1, 1),  # the same integer, written differently
    ],
)
def test_duplicate_keys_are_refused_where_they_repeat(
    text: str, line: int, column: int, first: int, loader: type[Any]
) -> None:
    error = refusal(text, loader)
    assert error.problems[0].message_key == "dsl.file.duplicateKey"
    assert located(error) == ("flow.yml", line, column)
    assert error.problems[0].params["first"] == first


def test_the_same_key_in_different_mappings_and_merge_overrides_are_fine(
    loader: type[Any],
) -> None:
    text = "a: {x: 1}\nb: {x: 2}\nbase: &b {x: 1}\nc:\n  <<: *b\n  x: 2\n"
    assert parse_yaml(text, "f.yml", loader=loader)["c"] == {"x": 2}


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("a: !!set {x, y}\n", "dsl.file.tag"),
        ("a: !!omap [x: 1]\n", "dsl.file.tag"),
        ("a: !custom [1]\n", "dsl.file.tag"),
        ("? [a, b]\n: 1\n", "dsl.file.unhashableKey"),
        ("a: {<<: 1}\n", "dsl.file.badMerge"),
        ("a: {<<: [{x: 1}, 2]}\n", "dsl.file.badMerge"),
    ],
)
def test_what_a_workflow_file_never_needs_is_refused_by_name(
    text: str, key: str, loader: type[Any]
) -> None:
    error = refusal(text, loader)
    assert error.problems[0].message_key == key
    assert located(error)[1] == 1


def test_non_utf8_is_located(loader: type[Any]) -> None:
    error = refusal(b"app:\n  name: caf\xe9 ok\n", loader)
    assert error.problems[0].message_key == "dsl.file.encoding"
    assert located(error) == ("flow.yml", 2, 12)
    assert error.problems[0].params == {"byte": "0xe9", "offset": 16}


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("a: [1, 2\nb: 3\n", 2, 2),
        ("a:\n\t- 1\n", 2, 1),
        ("a: 1\n---\nb: 2\n", 2, 1),  # a second document
        ("a: 'x\x1b[2Jy'\n", 1, 6),  # a control character
        ("a: !!python/object:os.system x\n", 1, 4),  # only safe tags construct
    ],
)
def test_syntax_errors_are_located(text: str, line: int, column: int, loader: type[Any]) -> None:
    error = refusal(text, loader)
    assert error.problems[0].message_key == "dsl.file.yaml"
    assert located(error) == ("flow.yml", line, column)
    assert str(error).startswith(f"flow.yml, line {line}, column {column}: not valid YAML: ")


def test_read_yaml_mapping_refuses_other_documents(tmp_path: Path) -> None:
    for body in ("- a\n- b\n", "just text\n", ""):
        path = tmp_path / "flow.yml"
        path.write_text(body, encoding="utf-8")
        with pytest.raises(DslError) as info:
            read_yaml_mapping(path)
        assert info.value.problems[0].message_key == "dsl.file.notMapping"
    assert read_yaml_mapping(path, empty={}) == {}
    with pytest.raises(DslError) as info:
        read_yaml_mapping(tmp_path / "missing.yml")
    assert info.value.problems[0].message_key == "dsl.file.missing"


def test_a_directory_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(DslError) as info:
        read_yaml(tmp_path)
    assert info.value.problems[0].message_key == "dsl.file.notFile"
    assert str(info.value) == f"{tmp_path} is a directory, not a file"


# --- bounds ---------------------------------------------------------------------


def test_a_file_over_the_byte_limit_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yml"
    with path.open("w", encoding="utf-8") as file:
        file.write("a: [" + "1," * (MAX_BYTES // 2) + "1]\n")
    assert path.stat().st_size > MAX_BYTES
    with pytest.raises(DslError) as info:
        read_yaml(path)
    assert info.value.problems[0].message_key == "dsl.file.tooLarge"
    assert info.value.problems[0].params["limit"] == MAX_BYTES


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_an_endless_file_is_read_only_up_to_the_limit() -> None:
    # Reading must stop at the limit: an endless stream cannot exhaust memory.
    with pytest.raises(DslError) as info:
        read_yaml("/dev/zero")
    assert info.value.problems[0].message_key == "dsl.file.tooLarge"


@pytest.mark.parametrize(
    "text",
    [
        "[" * 600 + "]" * 600,
        "{a: " * 600 + "1" + "}" * 600,
        "".join("  " * i + "- \n" for i in range(600)),  # block sequences
        "".join("  " * i + f"k{i}:\n" for i in range(600)) + "  " * 600 + "v\n",
    ],
    ids=["flow-seq", "flow-map", "block-seq", "block-map"],
)
def test_deep_nesting_is_refused_where_it_passes_the_limit(text: str, loader: type[Any]) -> None:
    error = refusal(text, loader)
    assert error.problems[0].message_key == "dsl.file.tooDeep"
    assert error.problems[0].params["limit"] == MAX_DEPTH
    _, line, column = located(error)
    assert line in (1, MAX_DEPTH, MAX_DEPTH + 1)  # where level MAX_DEPTH + 1 opens
    assert len(str(error)) < 200


def test_nesting_up_to_the_limit_loads(loader: type[Any]) -> None:
    depth = MAX_DEPTH
    value = parse_yaml("[" * depth + "]" * depth, "f.yml", loader=loader)
    for _ in range(depth - 1):
        value = value[0]
    assert value == []


def test_depth_counts_through_aliases(loader: type[Any]) -> None:
    half = MAX_DEPTH // 2 + 1
    deep = "[" * half + "]" * half
    assert parse_yaml(f"a: &d {deep}\n", "f.yml", loader=loader)
    error = refusal(f"a: &d {deep}\nb: {'[' * half}*d{']' * half}\n", loader)
    assert error.problems[0].message_key == "dsl.file.tooDeep"
    assert located(error)[1] == 2


def billion_laughs(levels: int, fan_out: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * fan_out) + "]"]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * fan_out)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


def test_alias_bombs_are_refused_at_the_alias_that_crosses_the_limit(loader: type[Any]) -> None:
    error = refusal(billion_laughs(9), loader)  # 9**10 'lol's, 2.6e10 expanded
    assert error.problems[0].message_key == "dsl.file.tooExpanded"
    assert error.problems[0].params["limit"] == MAX_ALIAS_GROWTH
    _, line, _ = located(error)
    assert line == 6  # level 5 is the first to add more than 1,000,000
    assert len(str(error)) < 200


def test_moderate_aliasing_loads_and_shares_the_objects(loader: type[Any]) -> None:
    document = parse_yaml(billion_laughs(4), "f.yml", loader=loader)  # 9**5 leaves
    assert document["a4"][0] is document["a3"]
    assert len(document["a4"]) == 9


def test_a_long_string_repeated_by_aliases_counts_its_length(loader: type[Any]) -> None:
    # 1,001 aliases of 1,000 characters: few nodes, but a megabyte of text.
    text = "s: &s " + "x" * 1000 + "\nl: [" + ", ".join(["*s"] * 1001) + "]\n"
    error = refusal(text, loader)
    assert error.problems[0].message_key == "dsl.file.tooExpanded"


def test_recursive_and_undefined_aliases(loader: type[Any]) -> None:
    error = refusal("a: &a [1, *a]\n", loader)
    assert error.problems[0].message_key == "dsl.file.recursiveAlias"
    assert located(error) == ("flow.yml", 1, 11)
    error = refusal("a: *nope\n", loader)
    assert error.problems[0].message_key == "dsl.file.undefinedAlias"
    assert error.problems[0].params["anchor"] == '"nope"'


def test_messages_quote_a_bounded_prefix(loader: type[Any]) -> None:
    key = "k" * 10_000
    error = refusal(f"{key}: 1\n{key}: 2\n", loader)
    assert len(str(error)) < 400
    anchor = "x" * 10_000
    error = refusal(f"a: *{anchor}\n", loader)
    assert len(str(error)) < 400


def test_quoting_a_value_never_writes_it_out() -> None:
    # 2**40 leaves if written out: quoting must stop at its limit, not after.
    value: Any = ["leaf"]
    for _ in range(40):
        value = [value, value]
    quoted = shown(value)
    assert quoted.startswith("[[[[") and quoted.endswith("…")
    assert len(quoted) == QUOTE_LIMIT + 1


# --- through the loader and the CLI's files ----------------------------------------


def test_a_huge_value_is_never_written_into_a_dsl_problem(tmp_path: Path) -> None:
    # app.name must be text; a 30,000-item list in its place is quoted, not printed.
    path = tmp_path / "flow.yml"
    items = ", ".join(["item"] * 30_000)
    path.write_text(f"app: {{mode: workflow, name: [{items}]}}\nworkflow: {{graph: {{}}}}\n")
    with pytest.raises(DslError) as info:
        load_workflow(path)
    assert "app.name" in str(info.value)
    assert len(str(info.value)) < 1000


def test_alias_bomb_in_a_workflow_file_is_a_dsl_error(tmp_path: Path) -> None:
    path = tmp_path / "flow.yml"
    bomb = billion_laughs(8).replace("\n", "\n  ")
    path.write_text(f"defs:\n  {bomb}\napp: {{mode: workflow, name: *a8}}\n")
    with pytest.raises(DslError) as info:
        load_workflow(path)
    assert info.value.problems[0].message_key == "dsl.file.tooExpanded"
