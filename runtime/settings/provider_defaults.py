"""What Dify's provider names imply about their route: the one table.

An export names its model provider as Dify does (`langgenius/openai/openai`);
a route of the settings file named so (or by the provider's short name,
`openai`, which `runtime.routes` matches to it) may leave out `kind` and
`base_url` where the provider implies them:

    providers:
      langgenius/anthropic/anthropic: {api_key_env: ANTHROPIC_API_KEY}

What a route writes always wins. Where the table gives no `base_url` (a
server of the user's own: OpenAI-compatible, vLLM, an Azure resource), the
route must name one, and the usual located problem says so. A route whose
`base_url` comes from the table (a public API) gets no liveness probe unless
it sets one: a cloud API has no status endpoint to ask; Ollama's gets the
`ollama` probe.

Kinds are named by their strings: an entry whose kind this build's protocol
registry does not have yet is a located problem for a route that relies on
it (`dsl.models.impliedKind`), and validates as soon as the kind is registered.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProviderDefaults:
    kind: str
    base_url: str | None = None
    # The probe a route gets when its base_url comes from this table.
    probe: str | None = None


_CLOUD = "off"

PROVIDER_DEFAULTS: dict[str, ProviderDefaults] = {
    "langgenius/openai/openai": ProviderDefaults(
        "openai-compatible", "https://api.openai.com/v1", _CLOUD
    ),
    "langgenius/anthropic/anthropic": ProviderDefaults(
        "anthropic", "https://api.anthropic.com", _CLOUD
    ),
    "langgenius/gemini/google": ProviderDefaults(
        "gemini", "https://generativelanguage.googleapis.com", _CLOUD
    ),
    "langgenius/ollama/ollama": ProviderDefaults("ollama", "http://127.0.0.1:11434", "ollama"),
    "langgenius/azure_openai/azure_openai": ProviderDefaults("azure-openai"),
    "langgenius/openai_api_compatible/openai_api_compatible": ProviderDefaults("openai-compatible"),
    "langgenius/vllm/vllm": ProviderDefaults("openai-compatible"),
    "langgenius/deepseek/deepseek": ProviderDefaults(
        "openai-compatible", "https://api.deepseek.com/v1", _CLOUD
    ),
    "langgenius/groq/groq": ProviderDefaults(
        "openai-compatible", "https://api.groq.com/openai/v1", _CLOUD
    ),
    "langgenius/mistralai/mistralai": ProviderDefaults(
        "openai-compatible", "https://api.mistral.ai/v1", _CLOUD
    ),
    "langgenius/openrouter/openrouter": ProviderDefaults(
        "openai-compatible", "https://openrouter.ai/api/v1", _CLOUD
    ),
    "langgenius/x/x": ProviderDefaults("openai-compatible", "https://api.x.ai/v1", _CLOUD),
}

# A provider's short name (`openai`) implies what its full id does.
_BY_SHORT_NAME = {name.rsplit("/", 1)[1]: spec for name, spec in PROVIDER_DEFAULTS.items()}


def defaults_for(route_name: str) -> ProviderDefaults | None:
    """What the provider a route is named after implies, if it is in the table."""
    # Another plugin's full id (`acme/openai/openai`) is in neither table.
    return PROVIDER_DEFAULTS.get(route_name) or _BY_SHORT_NAME.get(route_name)


# Set on a route's raw mapping when its kind came from the table but is not
# registered: the route's own validator reports it where the route is.
MISSING_KIND_MARK = "__implied_kind_missing__"


def with_defaults(route_name: str, raw: object, known_kinds: tuple[str, ...]) -> object:
    """The route's raw mapping with what its provider implies filled in where it is silent."""
    spec = defaults_for(route_name)
    if spec is None or not isinstance(raw, dict):
        return raw
    filled = dict(raw)
    if filled.get("kind") is None:
        filled["kind"] = spec.kind
        if spec.kind not in known_kinds:
            filled[MISSING_KIND_MARK] = {"provider": route_name, "kind": spec.kind}
    if filled["kind"] == spec.kind and spec.base_url and not filled.get("base_url"):
        filled["base_url"] = spec.base_url
        if spec.probe is not None:
            filled.setdefault("probe", spec.probe)
    return filled
