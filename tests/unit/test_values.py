"""Values rendered into text the way Dify renders them (its Segment.text / .markdown)."""

from __future__ import annotations

from firstgate.common import files
from firstgate.nodes.values import as_markdown, as_text


def test_text_of_each_kind() -> None:
    assert as_text(None) == ""
    assert as_text("hé") == "hé"
    assert as_text(3) == "3"
    assert as_text(2.5) == "2.5"
    assert as_text(True) == "True"
    assert as_text({"a": "é", "n": 1}) == '{"a": "é", "n": 1}'
    assert as_text(["x", "é"]) == '["x", "é"]'
    assert as_text([]) == ""
    assert as_text([1, 2.5]) == "[1, 2.5]"
    assert as_text([{"a": 1}]) == "[{'a': 1}]"


def test_markdown_of_each_kind() -> None:
    assert as_markdown(None) == ""
    assert as_markdown(1.0) == "1.0"
    assert as_markdown({"a": 1}) == '{\n  "a": 1\n}'
    assert as_markdown(["x", "y"]) == "- x\n- y"
    assert as_markdown([1, 2]) == "- 1\n- 2"
    assert as_markdown([]) == ""


def test_files_render_as_links_in_answers_and_as_nothing_in_prompts() -> None:
    doc = files.from_remote_url("https://h/a.pdf")
    pic = files.from_remote_url("https://h/p.png")
    assert as_text(doc) == ""
    assert as_text([doc, pic]) == ""
    assert as_markdown(doc) == "[a.pdf](https://h/a.pdf)"
    assert as_markdown([doc, pic]) == "[a.pdf](https://h/a.pdf)\n![p.png](https://h/p.png)"
