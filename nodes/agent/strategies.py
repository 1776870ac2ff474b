"""The agent node's built-in strategies: the rounds of model calls and tool
calls, each round reported as Dify's `agent_log` steps (`ROUND n`, the
model's thought, `CALL tool`).

Both strategies stop when the model answers without calling a tool, and
offer no tools in the last of `maximum` rounds, so the model must answer.
Every model call goes through the invoke path (`nodes.model_call`) with the
node's budgets; its errors propagate to the node's retry and error strategy.
A tool that fails, an unknown tool or arguments that are not a JSON object
become the observation the model reads next (the round goes on), as in
Dify's agents.

- `function_calling`: the tools travel as OpenAI tools; the model's tool
  calls run in order and their observations return as `tool` messages.
- `react`: the tools are described in the system prompt; the model writes
  `Thought:`, then `Action:` with a JSON object `{"action": name,
  "action_input": {...}}` (the action `Final Answer` ends the work), and the
  observation comes back as `Observation: ...` in the next user turn. A
  reply with no readable action is the final answer.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from firstgate.common.files import File
from firstgate.nodes.agent.tools import BoundTool, ToolRun, call
from firstgate.nodes.base import AgentLogEntry, NodeContext
from firstgate.nodes.llm.json_answer import read_json_object
from firstgate.nodes.llm.prompt import VisionConfig, attach_vision
from firstgate.nodes.model_call import ModelConfig, call_model
from firstgate.plugin_daemon_client.invoke import (
    CallBudgets,
    ModelReply,
    ModelRequest,
    ToolCallRequest,
)

FINAL_ANSWER = "Final Answer"


@dataclass(slots=True)
class Rounds:
    """What the strategies share: the node's context, model, budgets, tools."""

    ctx: NodeContext
    model: ModelConfig
    budgets: CallBudgets
    tools: dict[str, BoundTool]
    maximum: int
    vision: VisionConfig | None = None

    def with_images(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages with the turn's images on the last user message (vision on)."""
        if self.vision is not None:
            attach_vision(messages, self.vision, self.ctx.variables)
        return messages


@dataclass(slots=True)
class AgentResult:
    text: str = ""
    files: list[File] = field(default_factory=list)
    json: list[Any] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    rounds: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)
    # One record a round, kept in the node's process data: what an agent app's
    # messages list as their `agent_thoughts` (`serve/agent_chat.py` shapes them).
    thoughts: list[dict[str, Any]] = field(default_factory=list)

    def note(
        self, round_id: str, text: str, tools: list[str], tool_input: dict[str, Any]
    ) -> dict[str, Any]:
        noted = {
            "id": round_id,
            "position": len(self.thoughts) + 1,
            "thought": text,
            "tools": tools,
            "tool_input": tool_input,
            "observation": {},
            "files": [],
        }
        self.thoughts.append(noted)
        return noted

    def add(self, reply: ModelReply) -> None:
        self.calls.append(reply.process_data())
        usage = reply.usage_dict() or {}
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            self.usage[key] = self.usage.get(key, 0) + int(usage.get(key) or 0)

    def took(self, run: ToolRun) -> None:
        self.files.extend(run.files)
        self.json.extend(run.json)


class _Log:
    """Emits one step at its start and again, with the same id, at its end."""

    def __init__(self, ctx: NodeContext, label: str, parent: _Log | None = None) -> None:
        self.ctx = ctx
        self.id = uuid.uuid4().hex
        self.label = label
        self.parent_id = parent.id if parent is not None else None
        self.started = time.time()
        ctx.emit_agent_log(AgentLogEntry(self.id, label, "start", self.parent_id))

    def end(self, data: Mapping[str, Any], error: str | None = None, **meta: Any) -> None:
        finished = time.time()
        metadata = {
            "started_at": self.started,
            "finished_at": finished,
            "elapsed_time": round(finished - self.started, 3),
            **meta,
        }
        status = "error" if error else "success"
        self.ctx.emit_agent_log(
            AgentLogEntry(self.id, self.label, status, self.parent_id, error, data, metadata)
        )


def _system(base: str, instruction: str, context: str) -> str:
    parts = [base] if base else []
    if instruction.strip():
        parts.append(instruction.strip())
    if context.strip():
        parts.append(f"Use this context if it helps:\n{context.strip()}")
    return "\n\n".join(parts)


def _ask(
    rounds: Rounds, messages: list[dict[str, Any]], *, stream_text: bool, **request: Any
) -> ModelReply:
    parameters, stop = rounds.model.parameters()
    extra_stop = request.pop("stop", None)
    model_request = ModelRequest(
        rounds.model.name,
        messages,
        parameters,
        (stop or []) + (extra_stop or []) or None,
        budgets=rounds.budgets,
        **request,
    )
    return call_model(rounds.ctx, rounds.model.provider, model_request, stream_text=stream_text)


def _run_tool(
    rounds: Rounds,
    name: str,
    arguments: Any,
    round_log: _Log,
    result: AgentResult,
    noted: dict[str, Any],
) -> str:
    """One tool call as the model asked for it; returns the observation."""
    observation = _call_tool(rounds, name, arguments, round_log, result, noted)
    noted["observation"][name] = observation
    return observation


def _call_tool(
    rounds: Rounds,
    name: str,
    arguments: Any,
    round_log: _Log,
    result: AgentResult,
    noted: dict[str, Any],
) -> str:
    log = _Log(rounds.ctx, f"CALL {name}", round_log)
    tool = rounds.tools.get(name)
    if tool is None:
        observation = f"there is no tool named {name!r}; the tools are: {', '.join(rounds.tools)}"
        log.end({"tool_call_name": name, "tool_response": observation}, error=observation)
        return observation
    if not isinstance(arguments, dict):
        observation = f"the arguments of {name} must be a JSON object"
        log.end({"tool_call_name": name, "tool_response": observation}, error=observation)
        return observation
    run = call(tool, arguments, rounds.ctx)
    result.took(run)
    noted["files"] += [f.id for f in run.files]
    log.end(
        {
            "tool_call_name": name,
            "tool_call_input": arguments,
            "tool_response": run.observation,
            # The files the tool made (an agent app's `message_file` events).
            "files": [f.to_dict() for f in run.files],
        },
        error=run.error,
        provider=tool.entry.provider,
    )
    return run.observation


# --- function calling -----------------------------------------------------------------


def function_calling(
    rounds: Rounds,
    instruction: str,
    context: str,
    history: list[dict[str, Any]],
    query: str,
) -> AgentResult:
    result = AgentResult()
    system = _system("", instruction, context)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages += [*history, {"role": "user", "content": query}]
    rounds.with_images(messages)  # the query's message stays in every round
    texts: list[str] = []
    specs = tuple(tool.spec for tool in rounds.tools.values())
    for number in range(1, rounds.maximum + 1):
        result.rounds = number
        round_log = _Log(rounds.ctx, f"ROUND {number}")
        last = number == rounds.maximum
        thought = _Log(rounds.ctx, f"{rounds.model.name} Thought", round_log)
        offered = () if last else specs
        reply = _ask(rounds, messages, stream_text=True, tools=offered)
        result.add(reply)
        calls = reply.tool_calls if offered else ()
        names = [c.name for c in calls]
        # What an agent app's `agent_thought` shows before the tools run.
        tool_input = {c.name: c.parsed_arguments() for c in calls}
        noted = result.note(round_log.id, reply.text, names, tool_input)
        thought.end(
            {"output": reply.text, "tool_calls": names, "tool_input": tool_input},
            tokens=(reply.usage_dict() or {}).get("total_tokens", 0),
        )
        texts.append(reply.text)
        if not calls:
            round_log.end({"output": reply.text})
            break
        messages.append(_assistant_with_calls(reply.text, calls))
        for request in calls:
            observation = _run_tool(
                rounds, request.name, request.parsed_arguments(), round_log, result, noted
            )
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": request.id,
                    "name": request.name,
                    "content": observation,
                }
            )
        round_log.end({"output": reply.text, "tool_calls": [c.name for c in calls]})
    result.text = "".join(texts)
    return result


def _assistant_with_calls(text: str, calls: tuple[ToolCallRequest, ...]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments or "{}"},
            }
            for c in calls
        ],
    }


# --- ReAct ------------------------------------------------------------------------------

REACT_SYSTEM = (
    "Answer the user's question. You may use these tools:\n{tools}\n\n"
    "Work in steps. Write\n"
    "Thought: what you will do next\n"
    'Action: {{"action": "<one tool name>", "action_input": {{<its arguments>}}}}\n'
    "and stop; the tool's result comes back as an Observation. When you know the "
    "answer, write\n"
    "Thought: I know the answer\n"
    'Action: {{"action": "Final Answer", "action_input": "<your answer>"}}'
)


def _tool_lines(tools: dict[str, BoundTool]) -> str:
    return (
        "\n".join(
            f"- {name}: {tool.spec.description}; arguments (JSON schema): "
            f"{json.dumps(tool.spec.parameters, ensure_ascii=False)}"
            for name, tool in tools.items()
        )
        or "(no tools)"
    )


@dataclass(frozen=True, slots=True)
class _Action:
    name: str
    arguments: Any


def read_action(text: str) -> _Action | None:
    """The JSON action after the last `Action:` of a ReAct reply, or None."""
    at = text.rfind("Action:")
    if at < 0:
        return None
    found = read_json_object(text[at + len("Action:") :])
    if found is None:
        return None
    name = found.get("action")
    if not isinstance(name, str) or not name.strip():
        return None
    return _Action(name.strip(), found.get("action_input"))


def _final_text(text: str, action: _Action | None) -> str:
    if action is not None:  # the "Final Answer" action
        answer = action.arguments
        return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
    at = text.rfind(f"{FINAL_ANSWER}:")
    return text[at + len(FINAL_ANSWER) + 1 :].strip() if at >= 0 else text.strip()


def react(
    rounds: Rounds,
    instruction: str,
    context: str,
    history: list[dict[str, Any]],
    query: str,
) -> AgentResult:
    result = AgentResult()
    system = _system(REACT_SYSTEM.format(tools=_tool_lines(rounds.tools)), instruction, context)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, *history]
    scratchpad = ""
    final = ""
    for number in range(1, rounds.maximum + 1):
        result.rounds = number
        round_log = _Log(rounds.ctx, f"ROUND {number}")
        last = number == rounds.maximum
        prompt = query if not scratchpad else f"{query}\n\n{scratchpad}"
        if last and scratchpad:
            prompt += f"\nNo more tools now: write the {FINAL_ANSWER} action."
        thought = _Log(rounds.ctx, f"{rounds.model.name} Thought", round_log)
        asked = rounds.with_images([*messages, {"role": "user", "content": prompt}])
        reply = _ask(rounds, asked, stream_text=False, stop=["Observation:"])
        result.add(reply)
        action = read_action(reply.text)
        acts = action is not None and action.name != FINAL_ANSWER and not last
        names = [action.name] if acts and action else []
        tool_input = {action.name: action.arguments} if acts and action else {}
        noted = result.note(round_log.id, reply.text, names, tool_input)
        thought.end(
            {
                "output": reply.text,
                "action": action.name if action else None,
                "tool_calls": names,
                "tool_input": tool_input,
            },
            tokens=(reply.usage_dict() or {}).get("total_tokens", 0),
        )
        if action is None or action.name == FINAL_ANSWER or last:
            final_action = action if action is not None and action.name == FINAL_ANSWER else None
            final = _final_text(reply.text, final_action)
            round_log.end({"output": final})
            break
        observation = _run_tool(rounds, action.name, action.arguments, round_log, result, noted)
        scratchpad += f"{reply.text.strip()}\nObservation: {observation}\n"
        round_log.end({"output": reply.text, "action": action.name})
    result.text = final
    return result
