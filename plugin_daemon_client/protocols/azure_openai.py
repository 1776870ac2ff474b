"""Azure OpenAI chat completions (`kind: azure-openai`).

The same stream as OpenAI's chat completions (its decoder, fast path and error
bodies), at another address: `POST
{base_url}/openai/deployments/{deployment}/chat/completions?api-version=...`
with the key in `api-key`. `base_url` is the resource
(`https://<resource>.openai.azure.com`); the deployment is the node's model
name (as in Dify's Azure OpenAI provider); the API version is the one a
`?api-version=` on `base_url` names, else `API_VERSION`.
"""

from __future__ import annotations

from urllib.parse import parse_qs, quote, urlsplit

from .base import ChatCall
from .openai_compatible import OpenAICompatible
from .request import PreparedRequest

API_VERSION = "2024-10-21"


class AzureOpenAI(OpenAICompatible):
    kind = "azure-openai"
    # The resource's endpoint answers no liveness probe.
    default_probe = "off"

    def request(self, call: ChatCall) -> PreparedRequest:
        plain = super().request(call)
        parts = urlsplit(self.endpoint.base_url)
        version = parse_qs(parts.query).get("api-version", [API_VERSION])[0]
        root = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        deployment = quote(call.model, safe="-._~")
        url = (
            f"{root}/openai/deployments/{deployment}/chat/completions"
            f"?api-version={quote(version, safe='-._~')}"
        )
        headers = {k: v for k, v in plain.headers.items() if k != "Authorization"}
        if self.endpoint.api_key:
            headers["api-key"] = self.endpoint.api_key
        return PreparedRequest(url=url, headers=headers, body=plain.body)
