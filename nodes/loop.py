"""Loop node: runs its graph again and again, as Dify does.

`loop_variables` (typed; from a constant or a selector) are set when the loop
starts; its nodes read and write them as `[loop_id, label]` (an assigner
writes them), and they keep their values from round to round. Before the
first round and after each one the `break_conditions` (the if-else
operators, joined by `logical_operator`) are checked; a `loop-end` node
ending a round ends the loop too; at most `loop_count` rounds run. The loop
outputs its variables as they are at the end, and `loop_round` (rounds run).
A failed round fails the loop with its error.

The engine drives the rounds (`ContainerRun`); this module only decides.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Annotated, Any, Literal

from firstgate.common.dsl import DslModel, between
from firstgate.common.value_types import fits
from firstgate.nodes.base import (
    ContainerSpec,
    NodeContext,
    NodeResult,
    NodeRunError,
    Role,
    Round,
    RoundDone,
    Rounds,
    VariableReader,
)
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.if_else import Condition, condition_selectors, conditions_hold
from firstgate.nodes.selectors import Selector
from firstgate.nodes.spec import NodeSpec
from pydantic import Field

# Rounds at most (Dify's LOOP_NODE_MAX_COUNT is 100 by default; the DSL may say more).
MAX_LOOP_COUNT = 100_000

VarType = Literal[
    "string",
    "number",
    "object",
    "boolean",
    "array[string]",
    "array[number]",
    "array[object]",
    "array[boolean]",
]


class LoopVariable(DslModel):
    label: str = Field(min_length=1)
    var_type: VarType
    value_type: Literal["variable", "constant"] = "constant"
    value: Any = None


class Data(BaseNodeData):
    start_node_id: str = ""
    loop_count: Annotated[int, between(1, MAX_LOOP_COUNT)] = 10
    break_conditions: list[Condition] = Field(default_factory=list)
    logical_operator: Literal["and", "or"] = "and"
    loop_variables: list[LoopVariable] = Field(default_factory=list)


def _source(variable: LoopVariable) -> Selector | None:
    value = variable.value
    if variable.value_type != "variable" or not isinstance(value, list | tuple):
        return None
    if len(value) >= 2 and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    return None


def selectors(data: Data) -> list[Selector]:
    return [s for s in (_source(v) for v in data.loop_variables) if s is not None]


def output_names(data: Data) -> set[str]:
    return {v.label for v in data.loop_variables} | {"loop_round"}


def _inner_names(data: Data) -> set[str]:
    return {v.label for v in data.loop_variables}


def _round_selectors(data: Data) -> list[Selector]:
    return condition_selectors(data.break_conditions)


def _round_root(data: Data) -> str:
    return data.start_node_id


def run(data: Data, ctx: NodeContext) -> NodeResult:
    raise NodeRunError("errors.container.notANode", type="loop")  # the engine runs its rounds


def _constant(variable: LoopVariable) -> Any:
    """A constant as its declared type: the editor writes numbers, objects and
    arrays as text ("0", "[1, 2]"), which Dify reads as JSON."""
    value = variable.value
    if fits(variable.var_type, value):
        return value
    if variable.var_type.startswith("array") and value in (None, ""):
        return []
    if isinstance(value, str) and variable.var_type != "string":
        try:
            decoded = json.loads(value)
        except ValueError:
            decoded = None
        if fits(variable.var_type, decoded):
            return decoded
    raise NodeRunError(
        "errors.loop.badVariable",
        label=variable.label,
        type=variable.var_type,
        got=type(value).__name__,
    )


class _Loop:
    def __init__(self, data: Data, node_id: str, values: dict[str, Any]) -> None:
        self._data = data
        self._node_id = node_id
        self._values = dict(values)  # the variables after the latest round
        self._rounds = 0
        self._broke = False
        self._error: BaseException | None = None
        self.parallel = False  # one round after the other
        self.inputs: dict[str, Any] = {"loop_count": data.loop_count, **values}
        self.metadata = {"loop_length": data.loop_count}
        self.variables = dict(values)
        self.variable_types = {v.label: v.var_type for v in data.loop_variables}
        self._durations: dict[str, float] = {}
        self._by_round: dict[str, dict[str, Any]] = {}
        self.details: dict[str, Any] = {
            "loop_duration_map": self._durations,
            "loop_variable_map": self._by_round,
        }

    def _holds(self, variables: VariableReader) -> bool:
        data = self._data
        return conditions_hold(data.break_conditions, data.logical_operator, variables)

    def first(self, variables: VariableReader) -> Rounds:
        if self._holds(variables):
            self._broke = True
            return Rounds()
        return Rounds([Round(0, announced=False)])

    def saved(self) -> dict[str, Any]:
        return {
            "values": dict(self._values),
            "rounds": self._rounds,
            "broke": self._broke,
            "durations": dict(self._durations),
            "by_round": dict(self._by_round),
        }

    def resumed(self, saved: Mapping[str, Any], running: Collection[int]) -> Rounds:
        self._values = dict(saved["values"])
        self._rounds = int(saved["rounds"])
        self._broke = bool(saved["broke"])
        self._durations.update({str(k): float(v) for k, v in saved["durations"].items()})
        self._by_round.update({str(k): dict(v) for k, v in saved["by_round"].items()})
        if running or self._broke or self._rounds >= self._data.loop_count:
            return Rounds()  # the round in flight goes on; or the loop is over
        if self._rounds == 0:
            return Rounds([Round(0, announced=False)])  # its break conditions held no
        return self._next()

    def _next(self) -> Rounds:
        return Rounds([Round(self._rounds, previous_output=dict(self._values))])

    def after(self, done: RoundDone) -> Rounds:
        self._rounds = done.index + 1
        self._durations[str(done.index)] = done.elapsed
        self._values = {
            v.label: done.variables.get((self._node_id, v.label)) for v in self._data.loop_variables
        }
        self._by_round[str(done.index)] = dict(self._values)
        if done.error is not None:
            self._error = done.error
            return Rounds()
        if done.broke or self._holds(done.variables):
            self._broke = True
            return Rounds()
        if self._rounds >= self._data.loop_count:
            return Rounds()
        return self._next()

    def result(self) -> NodeResult:
        if self._error is not None:
            self.details["completed_reason"] = "error"
            raise self._error  # Dify fails the loop with the round's error
        self.details["completed_reason"] = "loop_break" if self._broke else "loop_completed"
        outputs = {**self._values, "loop_round": self._rounds}
        return NodeResult(outputs=outputs, inputs=self.inputs)


def _start(data: Data, ctx: NodeContext) -> _Loop:
    values: dict[str, Any] = {}
    for variable in data.loop_variables:
        source = _source(variable)
        if source is not None:
            value = ctx.variables.get(source)
            if value is None:
                raise NodeRunError(
                    "errors.loop.badVariable",
                    label=variable.label,
                    type=variable.var_type,
                    got="None",
                )
        else:
            value = _constant(variable)
        values[variable.label] = value
    return _Loop(data, ctx.node_id, values)


SPEC = NodeSpec(
    type="loop",
    role=Role.CONTAINER,
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=False,
    container=ContainerSpec(
        kind="loop",
        start=_start,
        round_root=_round_root,
        inner_names=_inner_names,
        writable=_inner_names,
        round_selectors=_round_selectors,
    ),
)
