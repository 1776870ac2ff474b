"""Fuzzing the DSL loader with mutated example documents: only DslError may escape."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.runtime import DslError, load_workflow
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yml"))
DOCUMENTS = [yaml.safe_load(path.read_text(encoding="utf-8")) for path in EXAMPLES]

VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**40), 2**40),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=10),
        st.sampled_from(
            [
                "",
                "start",
                "llm",
                "end",
                "answer",
                "fail-branch",
                "source",
                "{{#sys.query#}}",
                "{{#llm.text#}}",
                "{{#nope.x#}}",
                "{{ x }",
                "{% for %}",
                "template-transform",
                "if-else",
                "variable-aggregator",
                "custom",
                "custom-note",
            ]
        ),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found.extend(paths(value, (*prefix, key)))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found.extend(paths(value, (*prefix, index)))
    return found


def mutate(doc: Any, path: tuple[Any, ...], op: str, value: Any, data: st.DataObject) -> Any:
    if not path:
        return value if op == "replace" else doc
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    current = parent[key]
    if op == "delete":
        del parent[key]
    elif op == "replace":
        parent[key] = value
    elif op == "retype":
        conversions = [str(current), [current], {"v": current}, None, 0, True]
        parent[key] = data.draw(st.sampled_from(conversions))
    elif op == "duplicate" and isinstance(parent, list):
        parent.append(copy.deepcopy(current))
    elif op == "rename" and isinstance(parent, dict):
        parent[data.draw(st.text(max_size=6))] = parent.pop(key)
    elif op == "swap_ids" and isinstance(current, dict) and "id" in current:
        current["id"] = data.draw(st.sampled_from(["start", "llm", "end", "", "x"]))
    return doc


@settings(
    max_examples=250,
    deadline=None,
    database=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    which=st.integers(0, max(0, len(DOCUMENTS) - 1)),
    rounds=st.integers(1, 4),
    data=st.data(),
)
def test_mutated_examples_raise_only_dsl_errors(
    which: int, rounds: int, data: st.DataObject
) -> None:
    doc = copy.deepcopy(DOCUMENTS[which])
    for _ in range(rounds):
        candidates = paths(doc)
        path = data.draw(st.sampled_from(candidates))
        op = data.draw(
            st.sampled_from(["delete", "replace", "retype", "duplicate", "rename", "swap_ids"])
        )
        value = data.draw(VALUES)
        doc = mutate(doc, path, op, value, data)
    if not isinstance(doc, dict):
        return  # load_workflow takes a path or a mapping
    try:
        workflow = load_workflow(doc)
    except DslError as error:
        assert error.problems, "a DslError must say what is wrong"
        for problem in error.problems:
            assert isinstance(problem.render(), str)
        return
    assert workflow.graph.start_id in workflow.graph.nodes


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_unmutated_examples_load(path: Path) -> None:
    load_workflow(yaml.safe_load(path.read_text(encoding="utf-8")))
