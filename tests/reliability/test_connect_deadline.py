"""The first-token deadline runs from the request, connect included.

Found by the under-load test: a connect that hangs (the server's accept queue
is full, SYNs are dropped) was bounded only by the 10 s connect timeout, and
then reported as a ConnectError instead of the first-token timeout.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from firstgate.plugin_daemon_client import LLMClient, first_token_gate
from firstgate.plugin_daemon_client import errors as E


@pytest.fixture
def full_accept_queue() -> Iterator[int]:
    """A listening port that never accepts, its queue already full: connects hang."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(filler)
    time.sleep(0.05)
    try:
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_a_hanging_connect_is_a_first_token_timeout(full_accept_queue: int) -> None:
    client = LLMClient(base_url=f"http://127.0.0.1:{full_accept_queue}/v1")
    try:
        with pytest.raises(E.FirstTokenTimeoutError) as caught:
            with first_token_gate(first_token_timeout=0.3):
                list(client.invoke_llm("m", [{"role": "user", "content": "hi"}]))
    finally:
        client.close()
    error = caught.value
    assert error.deadline == "first_token"
    assert not error.progress.headers_received
    assert 0.3 <= error.progress.elapsed_s < 5.0  # the connect timeout is 10 s


def test_without_a_gate_the_connect_timeout_still_applies(full_accept_queue: int) -> None:
    import httpx

    client = LLMClient(
        base_url=f"http://127.0.0.1:{full_accept_queue}/v1",
        timeout=httpx.Timeout(5.0, connect=0.3),
    )
    try:
        with pytest.raises(E.ConnectError):
            list(client.invoke_llm("m", [{"role": "user", "content": "hi"}]))
    finally:
        client.close()
