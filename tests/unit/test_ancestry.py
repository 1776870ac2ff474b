"""`runtime.ancestry`: exact answers on any DAG, and work linear in a chain.

Speed is not asserted in seconds (machines are shared); the work is counted
instead: function calls while loading a chain, whose growth from 1,000 to
10,000 nodes must be linear (the old per-node ancestor walk grew 100-fold).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import firstgate.runtime.dsl.ancestry as ancestry
from firstgate.runtime import load_workflow
from firstgate.runtime.dsl.ancestry import Ancestry
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.chain_dsl import chain_document


def reaches(edges: list[tuple[str, str]], source: str, target: str) -> bool:
    """The plain definition, by search."""
    seen, stack = {source}, [source]
    while stack:
        node = stack.pop()
        for a, b in edges:
            if a == node and b not in seen:
                if b == target:
                    return True
                seen.add(b)
                stack.append(b)
    return False


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[str], list[tuple[str, str]]]:
    count = draw(st.integers(1, 40))
    nodes = [f"n{i}" for i in range(count)]
    order = draw(st.permutations(nodes))  # edges go forward in a random order: acyclic
    edges = draw(
        st.lists(
            st.tuples(st.integers(0, count - 1), st.integers(0, count - 1))
            .filter(lambda p: p[0] < p[1])
            .map(lambda p: (order[p[0]], order[p[1]])),
            max_size=80,
        )
    )
    return nodes, edges


@settings(max_examples=300, deadline=None, database=None)
@given(graph=dags(), chunk=st.sampled_from([1, 2, 3, 2048]))
def test_upstream_matches_the_definition_on_random_dags(
    graph: tuple[list[str], list[tuple[str, str]]], chunk: int
) -> None:
    nodes, edges = graph
    original = ancestry.CHUNK
    ancestry.CHUNK = chunk  # small chunks: several sweeps, as a huge graph would need
    try:
        index = Ancestry(nodes, edges)
        pairs = [(a, b) for a in nodes for b in nodes]
        answers = index.upstream(pairs)
    finally:
        ancestry.CHUNK = original
    assert index.acyclic
    assert answers == [a != b and reaches(edges, a, b) for a, b in pairs]


def test_a_chain_is_one_segment_and_branches_split_it() -> None:
    chain = [f"c{i}" for i in range(500)]
    index = Ancestry(chain, list(itertools.pairwise(chain)))
    assert len(index.predecessors) == 1
    assert index.upstream([("c3", "c400"), ("c400", "c3"), ("c7", "c7")]) == [True, False, False]
    # a diamond with a tail: a, then b|c, then d, e
    diamond = Ancestry("abcde", [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e")])
    assert diamond.upstream([("b", "e"), ("b", "c"), ("c", "b"), ("a", "e")]) == [
        True,
        False,
        False,
        True,
    ]


def test_duplicate_edges_and_cycles() -> None:
    assert Ancestry("ab", [("a", "b"), ("a", "b")]).upstream([("a", "b")]) == [True]
    assert not Ancestry("abc", [("a", "b"), ("b", "c"), ("c", "b")]).acyclic


def test_a_selector_that_is_not_upstream_is_still_reported() -> None:
    document = chain_document(30)
    nodes = document["workflow"]["graph"]["nodes"]
    # The 5th template reads the 20th one's output: downstream, so never set in time.
    nodes[5]["data"]["variables"][0]["value_selector"] = [nodes[20]["id"], "output"]
    warnings = load_workflow(document).warnings  # Dify loads it: a warning
    assert [p.message_key for p in warnings] == ["dsl.warning.notUpstream"]


@contextmanager
def counted_calls() -> Iterator[list[int]]:
    count = [0]

    def profile(frame: object, event: str, arg: object) -> None:
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(profile)
    try:
        yield count
    finally:
        sys.setprofile(None)


def test_validation_work_grows_linearly_with_a_chain() -> None:
    calls = []
    for length in (1_000, 10_000):
        document = chain_document(length)
        with counted_calls() as count:
            load_workflow(document)
        calls.append(count[0])
    # Linear: 10x the nodes, about 10x the calls. The per-node ancestor walk
    # this replaced made 1000x the calls at 10x the nodes... and took minutes.
    assert calls[1] / calls[0] < 12, calls
