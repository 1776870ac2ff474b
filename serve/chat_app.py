"""A chat app's (`app.mode: chat`) stream as Dify's chat apps send it on
`POST /v1/chat-messages`.

The app runs as the chatflow it was compiled into (`runtime.dsl.app_modes`),
whose stream carries workflow and node events a chat app does not send.
Dify's easy-UI task pipeline streams a chat app's turn as `message` (the
answer's text, `from_variable_selector` null), `message_replace` (the output
moderation's preset in place of the answer), `message_file`, `message_end` and
`error`, plus pings; everything else is dropped here. The envelope
(`conversation_id`, `message_id`, `created_at`, `task_id`) is the chatflow's,
which is already Dify's chat envelope. Chatflow (`advanced-chat`) apps keep
their own stream; the blocking reply is the same for both.
"""

from __future__ import annotations

import json
from typing import Any

from firstgate.runtime.dsl.app_modes import OUTPUT_PRESET_SELECTOR

CHAT_MODE = "chat"
# What a chat app's stream carries besides its messages, as the chatflow sends it.
_PASSED = ("message_file", "message_end", "error")
# Dify's reason on the answer its output moderation replaced.
_REPLACED_BY = "output_moderation"


def translate(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat app's events (none or one) one chatflow event makes."""
    name = event.get("event")
    if name == "message":
        selector = event.get("from_variable_selector")
        if selector == list(OUTPUT_PRESET_SELECTOR):
            shown = {k: v for k, v in event.items() if k not in ("id", "from_variable_selector")}
            return [{**shown, "event": "message_replace", "reason": _REPLACED_BY}]
        return [{**event, "from_variable_selector": None}]
    if name in _PASSED:
        return [event]
    return []


def frames(raw: bytes) -> list[bytes]:
    """One published event (JSON text) as the chat app's frames."""
    return [json.dumps(e).encode() for e in translate(json.loads(raw))]
