"""Agent node: a model that calls the node's tools, round after round, until
it answers (Dify's `agent` node with its built-in strategies).

Fields (Dify's): `agent_strategy_provider_name` (`langgenius/agent/agent`,
the official strategies), `agent_strategy_name` (`function_calling` or
`ReAct`), `agent_parameters` (each `{type, value}`: `model` (a model
selector), `tools` (`nodes.agent_tools`), `instruction` and `query`
(templates; `query` may also be a variable), `maximum_iterations` (also
`max_iterations`; 1 to 99, default 3), `context`), `memory`; and
firstgate's `invocation` (the gate's budgets for each model call).
Outputs: `text`, `files`, `json`, `usage`.

Strategies (`nodes.agent_strategies`): `function_calling` sends the tools as
OpenAI tools and runs the calls the model makes; `ReAct` asks for a
`Thought` / `Action` (a JSON action) / `Final Answer` text and reads it.
Each round's model call goes through the invoke path with its own
first-token budget (the prompt grows with every round), so a timeout there
reaches this node's retry and error strategy like any model call's. The last
round is offered no tools, so the model must answer. Every round, model
thought and tool call is an `agent_log` event.

Strategies of other providers run in a plugin (`nodes.agent_plugin`):
dispatched to the plugin daemon the settings file names (`tools.plugin_daemon`);
with none, the run is refused by name before it starts. Such a plugin calls
back into Dify (through the daemon) for its model and tool calls, so those
are not under firstgate's gate. Another strategy name under the official
provider is refused when the workflow loads.
"""

from __future__ import annotations

from typing import Any, Literal

from firstgate.common.dsl import DslModel, dsl_error, shown
from firstgate.common.sections import Sections, context_sections, validation_context
from firstgate.nodes.agent import plugin as agent_plugin
from firstgate.nodes.agent.history import function_calling_history, react_history
from firstgate.nodes.agent.strategies import Rounds, function_calling, react
from firstgate.nodes.agent.tools import ToolEntry, bind
from firstgate.nodes.base import Needs, NodeContext, NodeResult, NodeRunError
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.llm.prompt import (
    MemoryConfig,
    VisionConfig,
    history_messages,
    vision_selectors,
)
from firstgate.nodes.model_call import Invocation, ModelConfig, move_legacy_gate_params
from firstgate.nodes.selectors import Selector, template_selectors
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.values import as_text, render_text
from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

BUILTIN_PROVIDERS = ("", "agent", "langgenius/agent", "langgenius/agent/agent")
STRATEGIES = {
    "function_calling": "function_calling",
    "functioncalling": "function_calling",
    "react": "react",
    "cot": "react",
}
DEFAULT_ITERATIONS = 3
MAX_ITERATIONS = 99


class AgentInput(DslModel):
    type: Literal["mixed", "variable", "constant"] = "constant"
    value: Any = None


class Data(BaseNodeData):
    agent_strategy_provider_name: str = ""
    agent_strategy_name: str = Field(min_length=1)
    agent_strategy_label: str = ""
    agent_parameters: dict[str, AgentInput] = Field(default_factory=dict)
    memory: MemoryConfig | None = None
    # Not in Dify's agent node: an agent-chat app's `file_upload` images go to
    # its model with the query, as Dify's agent runner sends them (built-in
    # strategies; `runtime/dsl/app_modes` sets it).
    vision: VisionConfig = Field(default_factory=VisionConfig)
    # Not in Dify's agent node either: an agent-chat app's memory replays each
    # earlier turn's rounds (tool calls and results) and images, as Dify's agent
    # runner does; a chatflow's agent node remembers queries and answers only.
    replay_rounds: bool = False
    invocation: Invocation = Field(default_factory=Invocation)

    @model_validator(mode="before")
    @classmethod
    def _before(cls, raw: Any) -> Any:
        return move_legacy_gate_params(raw)

    @field_validator("agent_parameters", mode="before")
    @classmethod
    def _inputs(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        # Older exports write plain values; the editor leaves unset ones null.
        return {
            k: v if isinstance(v, dict) and "value" in v else {"type": "constant", "value": v}
            for k, v in value.items()
            if v is not None
        }

    # The tools as checked at load time, with the runtime settings that define
    # `api` and `workflow` tools (the node runs with what was checked).
    _tools: list[ToolEntry] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _runs_here(self, info: ValidationInfo) -> Data:
        provider = self.agent_strategy_provider_name
        if self.plugin:
            return self  # the plugin checks its own parameters
        if self.strategy is None:
            raise dsl_error(
                "dsl.agent.strategy",
                "the agent strategy {strategy} of {provider} is not built in (built in: "
                "function_calling and ReAct of langgenius/agent/agent)",
                strategy=shown(self.agent_strategy_name),
                provider=shown(provider or "(none)"),
            )
        model = self.model  # checked here: a missing model is a load-time problem
        if not model.name:
            raise dsl_error("dsl.agent.model", "the agent has no model")
        self._tools = self._read_tools(context_sections(info))
        iterations = self.maximum_iterations
        if not 1 <= iterations <= MAX_ITERATIONS:
            raise dsl_error(
                "dsl.agent.iterations",
                "maximum_iterations must be between 1 and {max}, got {got}",
                max=MAX_ITERATIONS,
                got=shown(iterations),
            )
        return self

    def _value(self, *names: str) -> Any:
        for name in names:
            item = self.agent_parameters.get(name)
            if item is not None and item.value is not None:
                return item.value
        return None

    @property
    def plugin(self) -> bool:
        """Whether a plugin runs this strategy (a provider other than the official one)."""
        return self.agent_strategy_provider_name not in BUILTIN_PROVIDERS

    @property
    def strategy(self) -> str | None:
        return STRATEGIES.get(self.agent_strategy_name.replace(" ", "").replace("-", "").lower())

    @property
    def model(self) -> ModelConfig:
        raw = self._value("model")
        if not isinstance(raw, dict):
            raise dsl_error("dsl.agent.model", "the agent has no model")
        name = raw.get("model") or raw.get("name") or ""
        return ModelConfig.model_validate(
            {
                "provider": raw.get("provider") or "",
                "name": name,
                "mode": raw.get("mode") or "chat",
                "completion_params": raw.get("completion_params") or {},
            }
        )

    @property
    def tools(self) -> list[ToolEntry]:
        if self._tools is None:
            self._tools = self._read_tools(None)
        return self._tools

    def _read_tools(self, sections: Sections | None) -> list[ToolEntry]:
        """Each entry checked as it is read (a tool that cannot run here is refused)."""
        raw = self._value("tools") or []
        if not isinstance(raw, list):
            raise dsl_error("dsl.agent.tools", "the agent's tools must be a list")
        context = validation_context(sections or Sections())
        return [ToolEntry.model_validate(entry, context=context) for entry in raw]

    @property
    def maximum_iterations(self) -> int:
        raw = self._value("maximum_iterations", "max_iterations")
        if raw is None:
            return DEFAULT_ITERATIONS
        try:
            return int(raw)
        except (TypeError, ValueError):
            return -1

    def text_input(self, name: str) -> AgentInput | None:
        return self.agent_parameters.get(name)


def selectors(data: Data) -> list[Selector]:
    found: list[Selector] = []
    for name in ("instruction", "query", "context"):
        item = data.text_input(name)
        if item is None:
            continue
        if item.type == "variable" and isinstance(item.value, list):
            found.append(tuple(item.value))
        elif isinstance(item.value, str):
            found.extend(template_selectors(item.value))
    return [*found, *vision_selectors(data.vision)]


def needs(data: Data) -> Needs:
    if data.plugin:
        shown_name = f"{data.agent_strategy_name} ({data.agent_strategy_provider_name})"
        return Needs(streams=frozenset({"text"}), plugin=shown_name)
    # Function calling streams each round's text (its output is all of it);
    # ReAct's replies are thoughts and actions: only the final answer is output.
    streams = frozenset({"text"}) if data.strategy == "function_calling" else frozenset()
    return Needs(model_providers=frozenset({data.model.provider}), streams=streams)


def output_names(data: Data) -> set[str]:
    return {"text", "files", "json", "usage"}


def history_of(data: Data, ctx: NodeContext) -> list[dict[str, Any]]:
    """The conversation's earlier turns as messages, when the node's memory is on."""
    memory = data.memory
    if memory is None or not memory.enabled or not ctx.variables.get(("sys", "conversation_id")):
        return []
    if not data.replay_rounds or data.plugin:
        return history_messages(ctx.history, memory)
    turns = list(ctx.history)[-memory.turns :]
    if data.strategy == "function_calling":
        return function_calling_history(turns, data.vision)
    return react_history(turns, data.vision)


def parameter_value(item: AgentInput, ctx: NodeContext) -> Any:
    """One agent parameter's value: a variable's value, a rendered template, or as given."""
    if item.type == "variable" and isinstance(item.value, list):
        return ctx.variables.get(tuple(item.value))
    return render_text(item.value, ctx.variables) if isinstance(item.value, str) else item.value


def _text(data: Data, name: str, ctx: NodeContext) -> str:
    item = data.text_input(name)
    if item is None or item.value is None:
        return ""
    value = parameter_value(item, ctx)
    return value if isinstance(value, str) else as_text(value)


def run(data: Data, ctx: NodeContext) -> NodeResult:
    if data.plugin:
        parameters = {
            name: parameter_value(item, ctx) for name, item in data.agent_parameters.items()
        }
        strategy = agent_plugin.PluginStrategy(
            data.agent_strategy_provider_name, data.agent_strategy_name
        )
        return agent_plugin.run(strategy, parameters, history_of(data, ctx), ctx)
    query = _text(data, "query", ctx)
    if not query.strip():
        raise NodeRunError("errors.agent.noQuery")
    instruction = _text(data, "instruction", ctx)
    context = _text(data, "context", ctx)
    history = history_of(data, ctx)
    rounds = Rounds(
        ctx=ctx,
        model=data.model,
        budgets=data.invocation.budgets(),
        tools=bind(data.tools, ctx.variables),
        maximum=data.maximum_iterations,
        vision=data.vision,
    )
    strategy = function_calling if data.strategy == "function_calling" else react
    result = strategy(rounds, instruction, context, history, query)
    return NodeResult(
        outputs={
            "text": result.text,
            "files": result.files,
            "json": result.json or [{"data": []}],
            "usage": result.usage,
        },
        usage=result.usage,
        process_data={
            "strategy": data.strategy,
            "model_provider": data.model.provider,
            "model_name": data.model.name,
            "rounds": result.rounds,
            "model_calls": result.calls,
            "agent_thoughts": result.thoughts,
        },
    )


SPEC = NodeSpec(
    type="agent",
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=True,
    needs=needs,
)
