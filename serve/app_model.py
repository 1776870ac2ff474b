"""What serve asks the app's model itself, as Dify does: a conversation's name
(`auto_generate`: a short title of the first query; the query itself, shortened,
when the app has no model node or the model fails or answers nothing) and the
questions a user may ask next (`/messages/{id}/suggested`: none on a failure)."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

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


def _ask(
    app: App,
    clients: RoutePlanner | None,
    messages: list[dict[str, Any]],
    parameters: dict[str, Any] | None = None,
) -> str | None:
    """The app's model's reply to `messages`; None when there is no model or it failed."""
    model = app_model(app)
    if clients is None or model is None:
        return None
    try:
        plan = plan_for(clients, model.provider)
        request = ModelRequest(model=model.name, messages=messages, parameters=parameters or {})
        return invoke(plan, request, Sinks()).text
    except Exception as exc:  # noqa: BLE001 - Dify falls back when the model fails
        log.warning("asking the app's model for a conversation name or questions failed: %s", exc)
        return None


def generate_name(app: App, clients: RoutePlanner | None, query: str) -> str:
    fallback = conversation_name(query)
    text = _ask(
        app, clients, [{"role": "system", "content": _PROMPT}, {"role": "user", "content": query}]
    )
    if text is None:
        return fallback
    name = " ".join(text.split()).strip("\"'")
    if not name:
        return fallback
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 3] + "..."


# Dify's shape of the request (`generate_suggested_questions_after_answer`): one
# user message, the conversation as `Human:`/`Assistant:` lines, then what to
# answer and the word `questions:`; no sampling, a short reply. The wording is ours.
_SUGGEST = (
    "Predict the three questions the human is most likely to ask next, each under "
    "20 characters, in the language of the assistant's latest reply. Answer with "
    'a JSON array of strings only, like ["question1","question2","question3"].'
)
_SUGGEST_PARAMETERS = {"temperature": 0, "max_tokens": 256}
_ARRAY = re.compile(r"\[.*?\]", re.DOTALL)
SUGGEST_TURNS = 3  # the last turns the model reads, as Dify's memory gives them
# Dify reads at most 3,000 tokens of them; about four characters a token.
SUGGEST_HISTORY_CHARS = 12_000


def _history(turns: list[tuple[str, str]]) -> str:
    """The last answered turns as `Human:`/`Assistant:` lines, the oldest dropped
    first while they are longer than the bound."""
    lines = [f"Human: {q}\nAssistant: {a}" for q, a in turns if a][-SUGGEST_TURNS:]
    while len(lines) > 1 and sum(len(line) + 1 for line in lines) > SUGGEST_HISTORY_CHARS:
        lines.pop(0)
    return "\n".join(lines)[-SUGGEST_HISTORY_CHARS:]


def suggest_questions(
    app: App, clients: RoutePlanner | None, turns: list[tuple[str, str]]
) -> list[str]:
    """The questions the app's model predicts after `turns` (query, answer; oldest
    first): the first JSON array in its reply, its strings; none on a failure."""
    prompt = f"{_history(turns)}\n{_SUGGEST}\nquestions:\n"
    text = _ask(app, clients, [{"role": "user", "content": prompt}], _SUGGEST_PARAMETERS)
    found = _ARRAY.search(text or "")
    if found is None:
        return []
    try:
        value = json.loads(found.group(0))
    except ValueError:
        return []
    return [q for q in value if isinstance(q, str) and q.strip()]
