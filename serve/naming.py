"""A conversation's name from the app's model (`auto_generate`), as Dify names
it: a short title of the first query; the query itself, shortened, when the
app has no model node or the model fails or answers nothing."""

from __future__ import annotations

import logging

from firstgate.nodes.base import RoutePlanner, plan_for
from firstgate.nodes.model_call import ModelConfig
from firstgate.plugin_daemon_client.invoke import ModelRequest, Sinks, invoke
from firstgate.serve.apps import App
from firstgate.store.relational import NAME_CHARS, conversation_name

log = logging.getLogger("firstgate.serve")

_PROMPT = (
    "You name conversations. Reply with a short title (at most ten words, in the "
    "language of the message) for a conversation that starts with the user's next "
    "message. Reply with the title alone: no quotes, no explanation."
)


def app_model(app: App) -> ModelConfig | None:
    """The model of the app's first node that calls one (its `data.model`)."""
    for node in app.workflow.graph.reachable_nodes():
        model = getattr(node.data, "model", None)
        if isinstance(model, ModelConfig) and node.needs.model_providers:
            return model
    return None


def generate_name(app: App, clients: RoutePlanner | None, query: str) -> str:
    fallback = conversation_name(query)
    model = app_model(app)
    if clients is None or model is None:
        return fallback
    try:
        plan = plan_for(clients, model.provider)
        reply = invoke(
            plan,
            ModelRequest(
                model=model.name,
                messages=[
                    {"role": "system", "content": _PROMPT},
                    {"role": "user", "content": query},
                ],
            ),
            Sinks(),
        )
    except Exception as exc:  # noqa: BLE001 - Dify names from the query when the model fails
        log.warning("naming a conversation with the app's model failed: %s", exc)
        return fallback
    name = " ".join(reply.text.split()).strip("\"'")
    if not name:
        return fallback
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 3] + "..."
