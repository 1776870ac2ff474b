"""What reaches a terminal or a JSON reader from a server is made harmless there."""

from __future__ import annotations

import json

from firstgate.runtime.cli.terminal import strict_json, terminal_safe


def test_escape_sequences_and_controls_become_visible() -> None:
    hostile = "a\x1b[2Jb\x1b]0;title\x07c\rd\x9b1me\u202ef\x7fg\x00"
    shown = terminal_safe(hostile)
    assert shown == "a␛[2Jb␛]0;title␇cd\\x9b1me\\u202ef\u2421g␀"
    assert not any(ord(ch) < 0x20 and ch not in "\t\n" for ch in shown)
    assert terminal_safe("tabs\tand\nnewlines stay, ünïcödé too") == (
        "tabs\tand\nnewlines stay, ünïcödé too"
    )


def test_strict_json_writes_null_for_what_json_cannot_hold() -> None:
    line = strict_json({"a": float("inf"), "b": [float("nan"), 1.5], "c": "x"})

    def refuse(name: str) -> object:
        raise AssertionError(name)

    assert json.loads(line, parse_constant=refuse) == {"a": None, "b": [None, 1.5], "c": "x"}
