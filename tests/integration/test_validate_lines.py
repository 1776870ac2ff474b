"""`firstgate validate` puts each graph problem at the line of the node or edge it
is about, and names an edge without an id by its position counted from 1."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_cli import firstgate

FLOW = """\
version: 0.1.5
kind: app
app: {name: Broken, mode: workflow}
workflow:
  graph:
    nodes:
      - id: start
        data:
          type: start
          title: Start
          variables: [{variable: topic, label: Topic, type: text-input}]
      - id: branch
        data:
          type: if-else
          title: Which?
          cases:
            - case_id: "yes"
              logical_operator: and
              conditions:
                - {variable_selector: [start, topic], comparison_operator: is, value: x}
      - id: shout
        data:
          type: template-transform
          title: Shout
          template: "{{ t }}"
          variables: [{variable: t, value_selector: [nowhere, text]}]
      - id: ask
        data: {type: knowledge-index, title: Ask}
      - id: retry
        data:
          type: template-transform
          title: Retry
          template: x
          retry_config: {retry_enabled: maybe}
      - id: end
        data: {type: end, title: End, outputs: []}
    edges:
      - {source: start, target: branch}
      - {source: branch, target: shout, sourceHandle: nope}
      - {source: branch, target: end, sourceHandle: "false"}
      - {source: shout, target: ghost}
      - id: named-edge
        source: end
        target: missing
"""


def line_of(text: str, needle: str) -> int:
    (line,) = [n for n, row in enumerate(text.splitlines(), 1) if needle in row]
    return line


def test_each_graph_problem_has_the_line_of_its_node_or_edge(tmp_path: Path) -> None:
    path = tmp_path / "broken.yml"
    path.write_text(FLOW, encoding="utf-8")
    result = firstgate("validate", str(path))
    assert result.returncode == 2, result.stderr
    problems = result.stderr.splitlines()[1:]
    assert len(problems) == 5, result.stderr  # the edge through handle nope: a warning

    def at(needle: str, column: int) -> str:
        return f"  {path}, line {line_of(FLOW, needle)}, column {column}: "

    def find(fragment: str) -> str:
        (found,) = [p for p in problems if fragment in p]
        return found

    # An edge's problem: the edge's line, and its position counted from 1 (the second edge).
    assert find("ghost").startswith(at("target: ghost", 9)), problems
    assert "edge #4 connects node ghost" in find("ghost")
    # An edge with an id is named by it, at the line its mapping starts on.
    assert find("named-edge").startswith(at("id: named-edge", 9)), problems
    # A node's problems: the node's line (a selector, its data, its type).
    assert find("nowhere").startswith(at("id: shout", 9) + 'node shout "Shout"'), problems
    assert find("retry_enabled").startswith(at("id: retry", 9)), problems
    assert find("knowledge-index").startswith(at("id: ask", 9)), problems
