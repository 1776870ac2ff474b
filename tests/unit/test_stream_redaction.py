"""A secret streamed back in pieces is masked whole: the streamed text holds back
what could be the start of an echo until it is whole or the stream ends."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest
from firstgate.common.redaction import MASK
from firstgate.runtime.execution.redaction import Redactor, StreamRedaction

SECRET = "sk-live-0123456789abcdef"


def streamed(text: str, step: int, redactor: Redactor) -> list[str]:
    stream = StreamRedaction(redactor)
    out = [stream.feed("answer", text[i : i + step]) for i in range(0, len(text), step)]
    return [*out, stream.flush("answer")]


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7, 100])
@pytest.mark.parametrize(
    "echo",
    [
        SECRET,
        quote(SECRET, safe=""),
        json.dumps(SECRET)[1:-1],
        base64.b64encode(f"user:{SECRET}".encode()).decode(),
    ],
)
def test_a_secret_in_pieces_never_goes_out(step: int, echo: str) -> None:
    text = f"Here it is: {echo} and that is all."
    pieces = streamed(text, step, Redactor([SECRET]))
    joined = "".join(pieces)
    assert SECRET not in joined
    assert SECRET[:12] not in joined  # not even its first half, cut off by a boundary
    assert joined == Redactor([SECRET]).text(text)  # what a whole-text redaction gives
    assert MASK in joined or "user:" not in echo


def test_text_without_secrets_goes_out_at_once() -> None:
    stream = StreamRedaction(Redactor())
    assert stream.feed("a", "hel") == "hel" and stream.feed("a", "lo") == "lo"
    assert stream.flush("a") == ""


def test_only_a_possible_start_of_a_secret_is_held_back() -> None:
    redactor = Redactor([SECRET])
    stream = StreamRedaction(redactor)
    long = "x" * 500
    out = stream.feed("a", long)
    held = redactor._text.longest_echo - 1
    assert out == "x" * (500 - held)
    assert stream.holding() == ["a"]
    assert stream.flush("a") == "x" * held
    assert stream.holding() == []


def test_streams_are_held_apart() -> None:
    stream = StreamRedaction(Redactor([SECRET]))
    first = stream.feed("one", SECRET[:10]) + stream.feed("two", SECRET[10:])
    rest = stream.flush("one") + stream.flush("two")
    # Two streams that each carry half the secret are not one secret.
    assert first == "" and rest == SECRET[:10] + SECRET[10:]
