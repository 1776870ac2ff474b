"""`kind: azure-openai`: OpenAI's chat completions stream at Azure's address
(deployment in the path, `api-version` query, `api-key` header); the stream,
its decoder and its error bodies are openai-compatible's (tested there)."""

from __future__ import annotations

import pytest
from firstgate.plugin_daemon_client import LLMClient, first_token_gate
from firstgate.plugin_daemon_client import errors as E
from firstgate.plugin_daemon_client.protocols.azure_openai import API_VERSION

from tests.fakes import llm_server as fake

SECRET = "azure-firstgate-PLANTED-7f3a9c"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("suffix", "version"),
    [("", API_VERSION), ("/?api-version=2025-01-01-preview", "2025-01-01-preview")],
)
def test_the_deployment_version_and_key_go_where_azure_wants_them(
    suffix: str, version: str
) -> None:
    with fake.FakeLLMServer([fake.pings(0.05, 0.2, then_tokens=["Hel", "lo"])]) as srv:
        client = LLMClient("azure-openai", srv.root_url + suffix, api_key=SECRET)
        with first_token_gate(first_token_timeout=5):
            chunks = list(client.invoke_llm("gpt-4o deploy", MESSAGES))
        (req,) = srv.requests
    assert "".join(c.text for c in chunks) == "Hello" and chunks[-1].usage is not None
    assert req.path == f"/openai/deployments/gpt-4o%20deploy/chat/completions?api-version={version}"
    assert req.headers["api-key"] == SECRET and "authorization" not in req.headers


def test_an_error_status_is_typed_and_the_key_is_never_printed() -> None:
    body = {"error": {"code": "401", "message": f"Access denied: {SECRET}"}}
    with fake.FakeLLMServer([fake.http_error(401, body=body)]) as srv:
        with pytest.raises(E.AuthorizationError) as info:
            list(LLMClient("azure-openai", srv.root_url, api_key=SECRET).invoke_llm("d", MESSAGES))
    assert not info.value.transient and SECRET not in str(info.value)
