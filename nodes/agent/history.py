"""An agent app's memory as Dify's agent runner rebuilds it: each earlier turn
is the user's message (with the images the user sent, when the app takes
images: files first, then the query, at the app's detail) and what the agent
did in it, from the rounds its agent node kept (`agent_thoughts`).

- function calling: a round that called tools is an assistant message with
  its `tool_calls` (the round's text as content), then one `tool` message per
  tool with its result; a round without tools is an assistant message with
  its text. A turn with no rounds kept is its answer.
- ReAct: the turn's rounds as one assistant scratchpad, in the form Dify
  writes it: `Thought: ...`, `Action: {"action", "action_input"}` and
  `Observation: ...` for each round that called a tool, `Final Answer: ...`
  for the answer.

Tool call ids are made from the round's id (stable across turns, so the
same history gives the same prompt).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from firstgate.common.files import FileType
from firstgate.nodes.base import ChatTurn
from firstgate.nodes.llm.prompt import VisionConfig, image_url

FINAL_ANSWER = "Final Answer"


def function_calling_history(
    turns: Sequence[ChatTurn], vision: VisionConfig | None
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for turn in turns:
        messages.append(_user(turn, vision))
        if not turn.thoughts:
            if turn.answer:
                messages.append({"role": "assistant", "content": turn.answer})
            continue
        for thought in turn.thoughts:
            messages += _round_messages(thought)
    return messages


def _round_messages(thought: Mapping[str, Any]) -> list[dict[str, Any]]:
    text = str(thought.get("thought") or "")
    tools = _tools(thought)
    if not tools:
        return [{"role": "assistant", "content": text}]
    inputs = _mapping(thought.get("tool_input"))
    results = _mapping(thought.get("observation"))
    ids = [_call_id(thought, i) for i in range(len(tools))]
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": tool, "arguments": _json(inputs.get(tool, {}))},
        }
        for call_id, tool in zip(ids, tools, strict=True)
    ]
    answers = [
        {"role": "tool", "tool_call_id": call_id, "name": tool, "content": _text(results, tool)}
        for call_id, tool in zip(ids, tools, strict=True)
    ]
    return [{"role": "assistant", "content": text, "tool_calls": calls}, *answers]


def react_history(turns: Sequence[ChatTurn], vision: VisionConfig | None) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for turn in turns:
        messages.append(_user(turn, vision))
        pad = "".join(_scratchpad(thought) for thought in turn.thoughts if _tools(thought))
        if pad or turn.answer:
            messages.append({"role": "assistant", "content": f"{pad}{FINAL_ANSWER}: {turn.answer}"})
    return messages


def _scratchpad(thought: Mapping[str, Any]) -> str:
    inputs = _mapping(thought.get("tool_input"))
    results = _mapping(thought.get("observation"))
    text = _react_thought(str(thought.get("thought") or ""))
    shown = f"Thought: {text}\n\n"
    for tool in _tools(thought):
        action = {"action": tool, "action_input": inputs.get(tool, {})}
        shown += f"Action: {_json(action)}\n\n"
        shown += f"Observation: {_text(results, tool)}\n\n"
    return shown


def _react_thought(reply: str) -> str:
    """The thought of a ReAct reply: before its action, without the `Thought:` label."""
    at = reply.rfind("Action:")
    text = (reply[:at] if at >= 0 else reply).strip()
    return text.removeprefix("Thought:").strip()


def _user(turn: ChatTurn, vision: VisionConfig | None) -> dict[str, Any]:
    images = [f for f in turn.files if f.type is FileType.IMAGE]
    if vision is None or not vision.enabled or not images:
        return {"role": "user", "content": turn.query}
    detail = vision.configs.detail
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": image_url(f), "detail": detail}} for f in images
    ]
    parts.append({"type": "text", "text": turn.query})
    return {"role": "user", "content": parts}


def _tools(thought: Mapping[str, Any]) -> list[str]:
    found = thought.get("tools")
    return [str(t) for t in found if t] if isinstance(found, list) else []


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(results: Mapping[str, Any], tool: str) -> str:
    value = results.get(tool, "")
    return value if isinstance(value, str) else _json(value)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _call_id(thought: Mapping[str, Any], index: int) -> str:
    seed = f"{thought.get('id') or ''}:{thought.get('position') or ''}:{index}"
    return "call_" + uuid.uuid5(uuid.NAMESPACE_OID, seed).hex[:24]
