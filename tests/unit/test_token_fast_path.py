"""The token fast paths never disagree with the full frame decoder."""

from __future__ import annotations

import json

from firstgate.plugin_daemon_client.protocols import openai_compatible as oc
from hypothesis import given, settings
from hypothesis import strategies as st


def frame(content: object, created: int = 1700000000, finish: object = None) -> bytes:
    doc = {
        "id": "chatcmpl-x",
        "created": created,
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}],
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def body_of(payloads: list[bytes], trailing: bool = True) -> bytes:
    """Complete SSE lines as `SSEDecoder.complete` returns them."""
    text = b"\n\n".join(b"data: " + p for p in payloads)
    return text + (b"\n" if trailing else b"")


def learned() -> oc.TokenDecoder:
    decoder = oc.TokenDecoder()
    assert decoder(frame("warm")) is None  # nothing learned yet: the full path decides
    decoder.learn(frame("warm"), oc.decode(frame("warm")))
    assert decoder(frame("warm")) == "warm"
    return decoder


def test_what_one_stream_learns_stays_with_that_stream() -> None:
    learned()
    assert oc.TokenDecoder()(frame("warm")) is None


def full_path(payloads: list[bytes]) -> tuple[int, str] | None:
    frames = [oc.decode(p) for p in payloads]
    if all(f.text and not (f.finish_reason or f.usage or f.reasoning) for f in frames):
        return len(frames), "".join(f.text for f in frames)
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=6), min_size=1, max_size=8), st.booleans())
def test_bulk_agrees_with_the_full_decoder(contents: list[str], trailing: bool) -> None:
    decoder = learned()
    payloads = [frame(c) for c in contents]
    got = decoder.bulk(body_of(payloads, trailing), 1 << 20)
    if got is not None:  # when the fast path answers, it answers what the full path says
        assert got == full_path(payloads)


def test_bulk_takes_plain_tokens_and_refuses_everything_else() -> None:
    decoder = learned()
    plain = [frame("Hel"), frame("lo "), frame("wörld")]
    assert decoder.bulk(body_of(plain), 1 << 20) == (3, "Hello wörld")
    refused = [
        [frame("a"), frame("b\\c")],  # needs unescaping
        [frame("a"), frame('say "hi"')],
        [frame("a"), frame("")],  # an empty delta is not a token
        [frame("a"), frame("b", finish="stop")],  # a different shape
        [frame("a"), frame("b", created=1700000001)],
    ]
    for payloads in refused:
        assert decoder.bulk(body_of(payloads), 1 << 20) is None, payloads
    pinged = body_of([frame("a")]) + b": ping\n\n" + body_of([frame("b")])
    assert decoder.bulk(pinged, 1 << 20) is None
    garbage = body_of([frame("a")]) + b"\nnot sse\n\n" + body_of([frame("b")])
    assert decoder.bulk(garbage, 1 << 20) is None


def test_bulk_respects_the_line_limit() -> None:
    decoder = learned()
    payloads = [frame("a"), frame("b" * 500)]
    assert decoder.bulk(body_of(payloads), 1 << 20) is not None
    assert decoder.bulk(body_of(payloads), 400) is None
