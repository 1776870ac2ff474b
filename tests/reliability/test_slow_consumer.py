"""A consumer slower than its sender must not outrun the deadlines.

Found by the chaos soak: past a deadline the transport kept reading "what is
already waiting" with no limit, so a server that sends a ping (or one byte)
faster than the client consumes it postponed the first-token deadline and the
absolute stream cap for as long as it kept sending.
"""

from __future__ import annotations

import time

import pytest
from firstgate.plugin_daemon_client import LLMClient, first_token_gate, sse
from firstgate.plugin_daemon_client import errors as E

from tests.fakes import llm_server as fake

MESSAGES = [{"role": "user", "content": "hi"}]
CONSUMER_DELAY_S = 0.04  # per received chunk; the server sends every 0.02 s
SENDS_FOR_S = 10.0


@pytest.fixture
def slow_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    feed = sse.SSEDecoder.feed

    def slow_feed(self: sse.SSEDecoder, chunk: bytes) -> list[bytes]:
        time.sleep(CONSUMER_DELAY_S)
        return feed(self, chunk)

    monkeypatch.setattr(sse.SSEDecoder, "feed", slow_feed)


def fail(server: fake.FakeLLMServer, **budgets: float) -> E.FirstGateError:
    client = LLMClient(base_url=server.base_url)
    try:
        with first_token_gate(**budgets):
            for _ in client.invoke_llm("m", MESSAGES):
                pass
    except E.FirstGateError as error:
        return error
    finally:
        client.close()
    raise AssertionError("the stream was expected to fail")


@pytest.mark.usefixtures("slow_consumer")
def test_pings_faster_than_the_consumer_do_not_postpone_the_first_token_deadline() -> None:
    with fake.FakeLLMServer(fake.pings(0.02, duration=SENDS_FOR_S)) as server:
        error = fail(server, first_token_timeout=0.3, stream_total_timeout=3.0)
    assert isinstance(error, E.FirstTokenTimeoutError), repr(error)
    # Late by draining what had arrived when the deadline was noticed (a backlog
    # that a consumer slower than its sender builds up), never by all the pings.
    assert error.progress.elapsed_s < SENDS_FOR_S / 2


@pytest.mark.usefixtures("slow_consumer")
def test_a_trickle_faster_than_the_consumer_still_hits_the_stream_cap() -> None:
    with fake.FakeLLMServer(fake.trickle(0.02, duration=SENDS_FOR_S)) as server:
        error = fail(server, first_token_timeout=1.0, idle_timeout=0.5, stream_total_timeout=0.6)
    assert isinstance(error, E.StreamTotalTimeoutError), repr(error)
    assert error.progress.elapsed_s < SENDS_FOR_S / 2
