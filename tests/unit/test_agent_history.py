"""An agent app's memory (`nodes/agent/history.py`) from stored rounds: the
edges the serve and runtime tests do not reach."""

from __future__ import annotations

import json

from firstgate.nodes.agent.history import function_calling_history, react_history
from firstgate.nodes.base import ChatTurn

ROUND = {
    "id": "r1",
    "position": 1,
    "thought": "Thought: the clock first\nAction: {}",
    "tools": ["clock", "calendar"],
    "tool_input": {"clock": {"zone": "UTC"}},
    "observation": {"clock": "12:00", "calendar": {"day": "Monday"}},
}
ANSWER = {"id": "r2", "position": 2, "thought": "Noon, Monday.", "tools": []}


def test_function_calling_replays_calls_results_and_answers() -> None:
    turns = [
        ChatTurn("When?", "Noon, Monday.", (ROUND, ANSWER)),
        ChatTurn("Plain turn", "Plain answer"),  # no rounds kept: its answer
        ChatTurn("Stopped early", ""),  # no answer: the query alone
    ]
    messages = function_calling_history(turns, None)
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "user", "assistant", "user"]
    called = messages[1]["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in called] == [{"zone": "UTC"}, {}]
    assert messages[2]["content"] == "12:00"
    assert json.loads(messages[3]["content"]) == {"day": "Monday"}
    assert messages[4]["content"] == "Noon, Monday." and messages[6]["content"] == "Plain answer"
    # The same stored rounds give the same ids (the same prompt every time).
    assert function_calling_history(turns, None)[1]["tool_calls"] == called
    assert len({c["id"] for c in called}) == 2


def test_react_replays_the_scratchpad() -> None:
    turns = [ChatTurn("When?", "Noon, Monday.", (ROUND, ANSWER)), ChatTurn("Quiet", "")]
    user, pad, quiet = react_history(turns, None)
    assert user == {"role": "user", "content": "When?"} and quiet["content"] == "Quiet"
    assert pad["content"].startswith("Thought: the clock first\n\nAction: ")
    assert pad["content"].count("Observation: ") == 2
    assert pad["content"].endswith("Final Answer: Noon, Monday.")
