"""Fuzzing the byte-level decoders: only the project's typed errors may escape.

The SSE decoder and both frame decoders see arbitrary bytes cut at arbitrary
points. Example counts are bounded so the whole file runs in seconds.
"""

from __future__ import annotations

import json
from typing import Any

from firstgate.common.redaction import Redactor
from firstgate.plugin_daemon_client.errors import FirstGateError
from firstgate.plugin_daemon_client.protocols import openai_compatible, plugin_daemon
from firstgate.plugin_daemon_client.protocols.frames import Frame, FrameError
from firstgate.plugin_daemon_client.sse import SSEDecoder, SSEViolation
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(
    max_examples=300,
    deadline=None,
    database=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SECRET = "sk-fuzz-CANARY-0b7e5d"


REDACTOR = Redactor([SECRET])


def assert_no_secret(error: FirstGateError) -> None:
    """Unscrubbed, server text is withheld; scrubbed (as the client shows it), redacted."""
    for shown in (error, REDACTOR.scrub(error)):
        assert SECRET not in str(shown) and SECRET not in repr(shown)
        assert all(SECRET not in str(value) for value in shown.params.values())


# Bytes that look like SSE often enough to get past the first line.
SSE_ATOMS = st.sampled_from(
    [
        b"data:",
        b"data: ",
        b": ping",
        b"event: x",
        b"id: 1",
        b"retry: 5",
        b"\n",
        b"\r\n",
        b"\r",
        b"\n\n",
        b'{"choices":[{"delta":{"content":"x"}}]}',
        b"[DONE]",
        b"x" * 40,
    ]
)
SSE_BYTES = st.one_of(
    st.binary(max_size=400),
    st.lists(st.one_of(SSE_ATOMS, st.binary(max_size=8)), max_size=40).map(b"".join),
)


def feed_split(decoder: SSEDecoder, data: bytes, cuts: list[int]) -> list[bytes]:
    out: list[bytes] = []
    last = 0
    for cut in sorted({min(c, len(data)) for c in cuts}):
        out.extend(decoder.feed(data[last:cut]))
        last = cut
    out.extend(decoder.feed(data[last:]))
    out.extend(decoder.close())
    return out


def outcome(data: bytes, cuts: list[int], max_line: int) -> tuple[str, Any]:
    try:
        return "ok", feed_split(SSEDecoder(max_line), data, cuts)
    except SSEViolation as violation:
        assert violation.kind in ("too_large", "not_sse")
        assert len(violation.line) <= 400
        return "violation", violation.kind


@FUZZ
@given(data=SSE_BYTES, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_sse_decoder_is_split_invariant_when_lines_fit(data: bytes, cuts: list[int]) -> None:
    """With every line under the limit, where the bytes are cut never changes the result."""
    whole = outcome(data, [], max_line=1 << 20)
    split = outcome(data, cuts, max_line=1 << 20)
    assert whole == split


@FUZZ
@given(
    data=SSE_BYTES,
    cuts=st.lists(st.integers(0, 400), max_size=12),
    max_line=st.integers(1, 64),
)
def test_sse_decoder_with_small_limits_raises_only_violations(
    data: bytes, cuts: list[int], max_line: int
) -> None:
    kind, payloads = outcome(data, cuts, max_line)
    if kind == "ok":
        for payload in payloads:
            assert len(payload) <= max_line


@settings(max_examples=40, deadline=None, database=None)
@given(chunk=st.integers(1, 4096), max_line=st.integers(16, 4096))
def test_sse_decoder_memory_is_bounded_by_the_line_limit(chunk: int, max_line: int) -> None:
    """A newline-free stream is refused once it passes the limit, never buffered forever."""
    decoder = SSEDecoder(max_line)
    fed = 0
    try:
        while fed < max_line + 2 * chunk + 1:
            decoder.feed(b"d" * chunk)
            fed += chunk
            assert len(decoder._buffer) <= max_line
    except SSEViolation as violation:
        assert violation.kind == "too_large"
    else:
        raise AssertionError("an endless line was accepted")


def json_values() -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=20,
    )


KEYS = st.sampled_from(
    [
        "choices",
        "delta",
        "content",
        "reasoning_content",
        "finish_reason",
        "usage",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "error",
        "code",
        "message",
        "timings",
        "data",
        "type",
        "error_type",
    ]
)


def shaped(depth: int = 3) -> st.SearchStrategy[Any]:
    """JSON built from the protocols' own keys, with values of any type."""
    if depth == 0:
        return json_values()
    inner = shaped(depth - 1)
    return st.one_of(
        json_values(),
        st.dictionaries(KEYS, inner, max_size=5),
        st.lists(inner, max_size=3),
    )


def encode(doc: Any) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


PAYLOADS = st.one_of(
    st.binary(max_size=300),
    shaped().map(encode),
    st.just(b"[" * 5_000),
    st.just(b'{"a":' * 3_000),
    st.just(b'{"choices": [], "usage": {"prompt_tokens": 1e999}}'),
    st.just(b'{"choices": [], "usage": {"prompt_tokens": NaN}}'),
)


def check_frame(frame: Frame) -> None:
    assert isinstance(frame, Frame)
    assert isinstance(frame.text, str) and isinstance(frame.reasoning, str)
    if frame.usage is not None:
        for value in (
            frame.usage.prompt_tokens,
            frame.usage.completion_tokens,
            frame.usage.total_tokens,
        ):
            assert isinstance(value, int)


@FUZZ
@given(payload=PAYLOADS)
def test_openai_decode_raises_only_typed_errors(payload: bytes) -> None:
    try:
        frame = openai_compatible.decode(payload)
    except (FrameError, FirstGateError):
        return
    check_frame(frame)


@FUZZ
@given(payload=PAYLOADS)
def test_plugin_daemon_decode_raises_only_typed_errors(payload: bytes) -> None:
    try:
        frame = plugin_daemon.decode(payload)
    except FrameError:
        return
    except FirstGateError as error:
        assert_no_secret(error)
        return
    check_frame(frame)


ENVELOPES = st.fixed_dictionaries(
    {"code": st.one_of(st.just(0), st.integers(-600, 600), json_values())},
    optional={
        "message": st.one_of(
            json_values(),
            st.builds(
                lambda t, m: json.dumps({"error_type": t, "message": m}),
                st.sampled_from(["PluginInvokeError", "InvokeRateLimitError", "X"]),
                st.one_of(
                    st.text(max_size=20).map(lambda s: s + SECRET),
                    st.builds(
                        lambda t: json.dumps({"error_type": t, "message": "k=" + SECRET}),
                        st.sampled_from(["InvokeAuthorizationError", "InvokeServerError", "Y"]),
                    ),
                ),
            ),
        ),
        "data": st.one_of(
            json_values(),
            st.fixed_dictionaries(
                {},
                optional={
                    "delta": st.one_of(
                        json_values(),
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "message": st.one_of(
                                    json_values(),
                                    st.fixed_dictionaries(
                                        {},
                                        optional={
                                            "content": st.one_of(
                                                json_values(),
                                                st.lists(
                                                    st.dictionaries(KEYS, json_values()),
                                                    max_size=3,
                                                ),
                                            )
                                        },
                                    ),
                                ),
                                "finish_reason": json_values(),
                                "usage": st.one_of(
                                    json_values(), st.dictionaries(KEYS, json_values())
                                ),
                            },
                        ),
                    )
                },
            ),
        ),
    },
)


@FUZZ
@given(envelope=ENVELOPES)
def test_plugin_daemon_envelopes_raise_only_typed_errors_without_the_key(
    envelope: dict[str, Any],
) -> None:
    try:
        frame = plugin_daemon.decode(encode(envelope))
    except FrameError:
        return
    except FirstGateError as error:
        assert_no_secret(error)
        return
    check_frame(frame)


@FUZZ
@given(status=st.integers(100, 700), body=st.one_of(st.binary(max_size=200), shaped().map(encode)))
def test_error_bodies_become_typed_errors(status: int, body: bytes) -> None:
    error = plugin_daemon.error_from_status(status, body + SECRET.encode(), retry_after_s=None)
    assert isinstance(error, FirstGateError)
    assert_no_secret(error)
