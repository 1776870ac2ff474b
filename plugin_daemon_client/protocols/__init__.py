"""Wire protocols behind one interface (`base.WireProtocol`), chosen by a route's `kind`.

Adding a protocol is one module here and one line in `PROTOCOLS`.
"""

from __future__ import annotations

from .anthropic import Anthropic
from .azure_openai import AzureOpenAI
from .base import ChatCall, Endpoint, StreamDecoder, ToolSpec, WireProtocol
from .gemini import Gemini
from .ollama import Ollama
from .openai_compatible import OpenAICompatible
from .openai_responses import OpenAIResponses
from .plugin_daemon import PluginDaemon

PROTOCOLS: dict[str, type[WireProtocol]] = {
    OpenAICompatible.kind: OpenAICompatible,
    PluginDaemon.kind: PluginDaemon,
    Anthropic.kind: Anthropic,
    OpenAIResponses.kind: OpenAIResponses,
    Ollama.kind: Ollama,
    Gemini.kind: Gemini,
    AzureOpenAI.kind: AzureOpenAI,
}

__all__ = [
    "PROTOCOLS",
    "ChatCall",
    "Endpoint",
    "OpenAICompatible",
    "PluginDaemon",
    "StreamDecoder",
    "ToolSpec",
    "WireProtocol",
]
