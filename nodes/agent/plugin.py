"""An agent strategy that a plugin runs: dispatched to the Dify plugin daemon
the settings file names (`tools.plugin_daemon`).

The node's parameters go as the export gives them, each resolved (a
variable's value, a rendered template); the model selector also carries the
conversation's earlier turns (`history_prompt_messages`), as Dify hands them
to strategy plugins. What comes back are tool messages: text (streamed as the
node's `text`), JSON, files and variables become outputs as a tool node's
do, and each `log` message is an `agent_log` event. The whole call is bounded
by `tools.timeout_s`; a failure is a typed tool error that reaches the node's
retry and error strategy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from firstgate.connectors.tool_messages import MessageType, ToolMessage
from firstgate.nodes.base import AgentLogEntry, NodeContext, NodeResult, NodeRunError
from firstgate.nodes.tool import collect
from firstgate.nodes.tool.providers import PluginProvider, capped, daemon_messages


@dataclass(frozen=True, slots=True)
class PluginStrategy:
    provider_id: str  # `org/plugin/provider`
    name: str


def _with_history(parameters: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
    model = parameters.get("model")
    if isinstance(model, dict):
        parameters = {
            **parameters,
            "model": {"model_type": "llm", **model, "history_prompt_messages": history},
        }
    return parameters


def _logged(messages: Iterable[ToolMessage], ctx: NodeContext) -> Iterator[ToolMessage]:
    """The strategy's `log` messages as `agent_log` events; the rest passed on."""
    for message in messages:
        if message.type is not MessageType.LOG:
            yield message
            continue
        step = message.json if isinstance(message.json, dict) else {}
        ctx.emit_agent_log(
            AgentLogEntry(
                str(step.get("id") or ""),
                str(step.get("label") or ""),
                str(step.get("status") or "start"),
                step.get("parent_id"),
                step.get("error"),
                step.get("data") if isinstance(step.get("data"), dict) else {},
                step.get("metadata") if isinstance(step.get("metadata"), dict) else {},
            )
        )


def run(
    strategy: PluginStrategy,
    parameters: dict[str, Any],
    history: list[dict[str, Any]],
    ctx: NodeContext,
) -> NodeResult:
    if ctx.connectors is None:
        raise NodeRunError("errors.connector.missing")
    tools = ctx.connectors.tools
    timeout_s, max_file_bytes = tools.timeout_s, tools.max_file_bytes
    provider = PluginProvider.from_settings(strategy.provider_id, ctx.connectors)
    sent = _with_history(parameters, history)
    stream = provider.client.invoke_agent_strategy(
        strategy.provider_id,
        strategy.name,
        sent,
        timeout_s=timeout_s,
        cancel=ctx.cancel,
        secrets=tuple(provider.credentials.values()),
    )
    messages = daemon_messages(
        stream,
        provider.client,
        strategy.name,
        strategy.provider_id,
        timeout_s,
        failed_key="errors.agent.pluginFailed",
    )
    # Closed here, on every path: the stream holds a socket and its deadline.
    with contextlib.closing(capped(messages, max_file_bytes)) as capped_messages:
        outputs = collect(_logged(capped_messages, ctx), ctx)
    outputs.setdefault("usage", {})
    return NodeResult(
        outputs=outputs,
        process_data={
            "strategy": strategy.name,
            "strategy_provider": strategy.provider_id,
            "dispatched_to": provider.client.base_url,
        },
    )
