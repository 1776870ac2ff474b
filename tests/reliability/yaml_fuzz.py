"""Hostile YAML, generated: alias structures and deep nesting placed in real
workflow documents, read and loaded while `tracemalloc` watches the peak.

Run by `test_fuzz_yaml.py` in a child process with an address-space limit (so
a reader that expanded an alias bomb would die, not take the machine with it);
prints one JSON line: examples run, outcomes, and the largest peak seen.
"""

from __future__ import annotations

import argparse
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import yaml
from firstgate.common.yaml_reader import LOADERS, parse_yaml
from firstgate.runtime import DslError, load_workflow
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reliability.test_fuzz_dsl import paths

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yml"))
DOCUMENTS = [yaml.safe_load(path.read_text(encoding="utf-8")) for path in EXAMPLES]
MARK = "__HOSTILE_VALUE__"
# The messages a hostile document may end in: bounds, or an ordinary DSL problem.
READER_KEYS = {
    "dsl.file.tooExpanded",
    "dsl.file.tooDeep",
    "dsl.file.recursiveAlias",
    "dsl.file.undefinedAlias",
    "dsl.file.duplicateKey",
    "dsl.file.yaml",
}
MESSAGE_LIMIT = 4000  # characters in a whole error: values are quoted, never written out

SCALARS = st.sampled_from(["lol", "x" * 200, "1", "true", "", "{{#sys.query#}}", "null"])


@st.composite
def alias_structure(draw: st.DrawFn) -> tuple[list[str], str]:
    """Anchor definitions, each a list or mapping of scalars and aliases of
    earlier anchors (possibly several levels of fan-out: a bomb), and the alias
    to place in the document."""
    count = draw(st.integers(1, 14))
    lines: list[str] = []
    for index in range(count):
        width = draw(st.integers(1, 12))
        items = []
        for _ in range(width):
            if index and draw(st.booleans()):
                items.append(f"*a{draw(st.integers(max(0, index - 3), index - 1))}")
            else:
                items.append(json.dumps(draw(SCALARS)))
        if draw(st.booleans()):
            body = "[" + ", ".join(items) + "]"
        else:
            body = "{" + ", ".join(f"k{i}: {item}" for i, item in enumerate(items)) + "}"
        lines.append(f"  - &a{index} {body}")
    return lines, f"*a{draw(st.integers(0, count - 1))}"


@st.composite
def bomb(draw: st.DrawFn) -> tuple[list[str], str]:
    """Levels of fan-out, each level aliasing the one below it several times."""
    levels = draw(st.integers(2, 12))
    fan_out = draw(st.integers(2, 12))
    lines = [f"  - &a0 {json.dumps(draw(SCALARS))}"]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * fan_out)
        lines.append(f"  - &a{level} [{refs}]")
    return lines, f"*a{levels}"


@st.composite
def nested_value(draw: st.DrawFn) -> str:
    """A flow value nested 1 to 700 levels deep, lists and mappings mixed."""
    depth = draw(st.one_of(st.integers(1, 100), st.integers(101, 700)))
    kinds = draw(st.lists(st.booleans(), min_size=depth, max_size=depth))
    opening = "".join("[" if is_list else "{k: " for is_list in kinds)
    closing = "".join("]" if is_list else "}" for is_list in reversed(kinds))
    return opening + draw(SCALARS).replace('"', "") + closing


def with_marker(document: Any, path: tuple[Any, ...]) -> dict[str, Any]:
    copy = json.loads(json.dumps(document))
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = MARK
    return copy


def hostile_text(draw: st.DrawFn) -> str:
    document = draw(st.sampled_from(DOCUMENTS))
    # Where the editor writes values an attacker controls: names, defaults,
    # environment values, node data; any path of a real document.
    path = draw(st.sampled_from([p for p in paths(document) if p]))
    text = yaml.safe_dump(with_marker(document, path), allow_unicode=True, width=10_000)
    kind = draw(st.sampled_from(["aliases", "bomb", "nested"]))
    if kind == "nested":
        return text.replace(MARK, draw(nested_value()))
    definitions, alias = draw(alias_structure() if kind == "aliases" else bomb())
    text = "defs:\n" + "\n".join(definitions) + "\n" + text
    return text.replace(MARK, alias)


class Outcomes:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.peak = 0
        self.longest_message = 0
        self.largest_json = 0

    def note(self, outcome: str, peak: int) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        self.peak = max(self.peak, peak)


def one_example(text: str, loader: type[Any], outcomes: Outcomes) -> None:
    tracemalloc.reset_peak()
    before, _ = tracemalloc.get_traced_memory()
    try:
        document = parse_yaml(text.encode("utf-8"), "hostile.yml", loader=loader)
        # What a run does with values (--json, rendering): write every alias out.
        outcomes.largest_json = max(outcomes.largest_json, len(json.dumps(document, default=str)))
        outcome = "read"
        try:
            load_workflow(document)
            outcome = "loaded"
        except DslError as error:
            message = str(error)
            outcomes.longest_message = max(outcomes.longest_message, len(message))
            assert len(message) < MESSAGE_LIMIT, message[:300]
            outcome = "invalid"
    except DslError as error:
        key = error.problems[0].message_key
        assert key in READER_KEYS, key
        assert len(str(error)) < MESSAGE_LIMIT
        outcome = key.rsplit(".", 1)[-1]
    _, peak = tracemalloc.get_traced_memory()
    outcomes.note(outcome, peak - before)


def run(examples: int) -> dict[str, Any]:
    outcomes = Outcomes()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data(), loader=st.sampled_from(LOADERS))
    def fuzz(data: st.DataObject, loader: type[Any]) -> None:
        one_example(data.draw(st.composite(lambda draw: hostile_text(draw))()), loader, outcomes)

    tracemalloc.start()
    fuzz()
    tracemalloc.stop()
    return {
        "examples": sum(outcomes.counts.values()),
        "outcomes": outcomes.counts,
        "peak_bytes": outcomes.peak,
        "longest_message": outcomes.longest_message,
        "largest_json": outcomes.largest_json,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=200)
    args = parser.parse_args(argv)
    sys.stdout.write(json.dumps(run(args.examples)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
