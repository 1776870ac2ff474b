"""The SSE decoder and the frame decoders: what counts as a content token."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from firstgate.common.redaction import Redactor
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.protocols import openai_compatible, plugin_daemon
from firstgate.plugin_daemon_client.protocols.frames import FrameError
from firstgate.plugin_daemon_client.sse import SSEDecoder, SSEViolation
from hypothesis import given, settings
from hypothesis import strategies as st

STREAM = (
    b": ping\n\n"
    b'data: {"choices":[{"delta":{"role":"assistant","content":null},"finish_reason":null}]}\n\n'
    b"event: message\r\n"
    b'data: {"choices":[{"delta":{"content":"Hel"},"finish_reason":null}]}\r\n\r\n'
    b'data:{"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def decode_all(chunks: list[bytes]) -> list[bytes]:
    decoder = SSEDecoder()
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    out.extend(decoder.close())
    return out


def test_decoder_skips_comments_and_fields_and_strips_cr() -> None:
    payloads = decode_all([STREAM])
    assert len(payloads) == 4
    assert payloads[-1] == b"[DONE]"
    assert all(not p.endswith(b"\r") for p in payloads)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_points_give_the_same_frames(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    chunks = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)], strict=True)]
    assert decode_all(chunks) == decode_all([STREAM])


def test_line_limit_applies_to_partial_lines_too() -> None:
    decoder = SSEDecoder(max_line_bytes=100)
    with pytest.raises(SSEViolation) as info:
        decoder.feed(b"data: " + b"x" * 200)  # no newline yet: must not buffer forever
    assert info.value.kind == "too_large"


def test_a_line_that_is_not_sse_is_a_violation() -> None:
    with pytest.raises(SSEViolation) as info:
        SSEDecoder().feed(b'{"not": "sse"}\n')
    assert info.value.kind == "not_sse"


def openai(delta: dict, finish: str | None = None) -> bytes:
    return json.dumps({"choices": [{"delta": delta, "finish_reason": finish}]}).encode()


@pytest.mark.parametrize(
    ("payload", "is_token"),
    [
        (openai({"role": "assistant", "content": None}), False),
        (openai({"role": "assistant", "content": ""}), False),
        (openai({"content": "x"}), True),
        (openai({"reasoning_content": "thinking"}), True),
        (openai({}, "stop"), False),
        (json.dumps({"choices": [], "usage": {"prompt_tokens": 3}}).encode(), False),
        (json.dumps({"choices": [], "timings": {"prompt_n": 3}}).encode(), False),
    ],
)
def test_only_content_counts_as_a_token(payload: bytes, is_token: bool) -> None:
    assert openai_compatible.decode(payload).is_token is is_token


def scrubbed(decode: Callable[[bytes], object], payload: bytes) -> E.FirstGateError:
    """The error `decode` raises, as the client shows it (after its redactor)."""
    with pytest.raises(E.FirstGateError) as info:
        decode(payload)
    assert "(withheld)" in str(info.value)  # server text never prints unscrubbed
    return Redactor().scrub(info.value)


def test_openai_error_frame_mid_stream_is_typed() -> None:
    frame = json.dumps({"error": {"code": 503, "message": "loading model"}}).encode()
    error = scrubbed(openai_compatible.decode, frame)
    assert isinstance(error, E.ServerUnavailableError) and "loading model" in str(error)


@pytest.mark.parametrize(
    "payload", [b"{", b"[1,2]", b'{"choices": [3]}', b'{"choices":[{"delta":{"content":5}}]}']
)
def test_openai_malformed_frames(payload: bytes) -> None:
    with pytest.raises(FrameError):
        openai_compatible.decode(payload)


def daemon(content: object, finish: str | None = None) -> bytes:
    delta = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": finish,
    }
    return json.dumps({"code": 0, "message": "", "data": {"model": "m", "delta": delta}}).encode()


def test_daemon_frames() -> None:
    assert plugin_daemon.decode(daemon("hi")).text == "hi"
    assert not plugin_daemon.decode(daemon(None)).is_token
    assert (
        plugin_daemon.decode(
            daemon([{"type": "text", "data": "a"}, {"type": "image", "data": "u"}])
        ).text
        == "a"
    )
    assert plugin_daemon.decode(daemon("", "stop")).finish_reason == "stop"


def test_daemon_nested_error_keeps_the_message() -> None:
    inner = json.dumps({"error_type": "InvokeRateLimitError", "message": "quota exceeded"})
    outer = json.dumps({"error_type": "PluginInvokeError", "message": inner})
    envelope = json.dumps({"code": -500, "message": outer, "data": None}).encode()
    error = scrubbed(plugin_daemon.decode, envelope)
    assert isinstance(error, E.RateLimitError) and "quota exceeded" in str(error)


def test_daemon_plain_string_error() -> None:
    envelope = json.dumps({"code": -500, "message": "plugin crashed", "data": None}).encode()
    error = scrubbed(plugin_daemon.decode, envelope)
    assert isinstance(error, E.InvokeServerError) and "plugin crashed" in str(error)


def test_invalid_utf8_in_a_token_becomes_a_replacement_character() -> None:
    """As the OpenAI clients decode it: one bad byte sequence never fails the reply."""
    bad = daemon("@@").replace(b"@@", b"a\xffb")
    assert plugin_daemon.decode(bad).text == "a\ufffdb"
    frame = json.dumps({"choices": [{"delta": {"content": "@@"}}]}).encode()
    assert openai_compatible.decode(frame.replace(b"@@", b"\xc3(")).text == "\ufffd("
