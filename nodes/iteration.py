"""Iteration node: runs its graph once per item of an array, as Dify does.

Each round reads `[iteration_id, item]` and `[iteration_id, index]`; what the
round leaves at `output_selector` becomes that item's output. `is_parallel`
runs up to `parallel_nums` rounds at once; the outputs keep the items' order
either way. `error_handle_mode` says what a failed round does:
`terminated` (the default) stops the rounds still running and fails the
iteration with the round's error, `continue-on-error` gives that item the
output None, `remove-abnormal-output` leaves the item out. With
`flatten_output` (on by default) outputs that are all lists are joined into
one list.

The engine drives the rounds (`ContainerRun`); this module only decides.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from typing import Annotated, Any, Literal

from firstgate.common.dsl import between
from firstgate.common.files import File
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
from firstgate.nodes.config import BaseNodeData, OptionalSelector, SelectorField
from firstgate.nodes.selectors import Selector
from firstgate.nodes.spec import NodeSpec

# Rounds at once in parallel mode (Dify's editor offers 1-100).
MAX_PARALLEL = 100

ErrorHandleMode = Literal["terminated", "continue-on-error", "remove-abnormal-output"]


class Data(BaseNodeData):
    start_node_id: str = ""
    iterator_selector: SelectorField
    output_selector: OptionalSelector = None
    is_parallel: bool = False
    parallel_nums: Annotated[int, between(1, MAX_PARALLEL)] = 10
    error_handle_mode: ErrorHandleMode = "terminated"
    flatten_output: bool = True


def selectors(data: Data) -> list[Selector]:
    return [data.iterator_selector]


def output_names(data: Data) -> set[str]:
    return {"output"}


def _inner_names(data: Data) -> set[str]:
    return {"item", "index"}


def _writable(data: Data) -> set[str]:
    return set()


def _round_selectors(data: Data) -> list[Selector]:
    return [data.output_selector] if data.output_selector is not None else []


def _round_root(data: Data) -> str:
    return data.start_node_id


def run(data: Data, ctx: NodeContext) -> NodeResult:
    raise NodeRunError("errors.container.notANode", type="iteration")  # the engine runs its rounds


class _Iteration:
    def __init__(self, data: Data, items: list[Any]) -> None:
        self._data = data
        self._items = items
        self._width = data.parallel_nums if data.is_parallel else 1
        self.parallel = self._width > 1
        self._pending = deque(range(len(items)))  # the rounds not started yet, in order
        self._done: set[int] = set()  # finished rounds (parallel ones finish out of order)
        self._outputs: dict[int, Any] = {}
        self._error: BaseException | None = None
        self.inputs = {"iterator_selector": items}
        self.metadata = {"iteration_length": len(items)}
        self.variables: dict[str, Any] = {}
        self.variable_types: dict[str, str] = {}
        self._durations: dict[str, float] = {}
        self.details = {"iteration_duration_map": self._durations}

    def _take(self, count: int, previous: Any = None) -> list[Round]:
        rounds = []
        while self._pending and len(rounds) < count:
            i = self._pending.popleft()
            rounds.append(Round(i, {"item": self._items[i], "index": i}, previous_output=previous))
        return rounds

    def first(self, variables: VariableReader) -> Rounds:
        return Rounds(self._take(self._width))

    def saved(self) -> dict[str, Any]:
        return {
            "done": sorted(self._done),
            "outputs": [[i, o] for i, o in sorted(self._outputs.items())],
            "durations": dict(self._durations),
        }

    def resumed(self, saved: Mapping[str, Any], running: Collection[int]) -> Rounds:
        self._done = {int(i) for i in saved["done"]}
        self._outputs = {int(i): o for i, o in saved["outputs"]}
        self._durations.update({str(k): float(v) for k, v in saved["durations"].items()})
        skip = self._done | set(running)
        self._pending = deque(i for i in range(len(self._items)) if i not in skip)
        previous = self._outputs.get(max(self._done)) if self._done else None
        return Rounds(self._take(self._width - len(running), previous))

    def after(self, done: RoundDone) -> Rounds:
        self._durations[str(done.index)] = done.elapsed
        self._done.add(done.index)
        output = None
        if done.error is not None:
            if self._data.error_handle_mode == "terminated":
                if self._error is None:
                    self._error = done.error
                return Rounds(stop=True)
            if self._data.error_handle_mode == "continue-on-error":
                self._outputs[done.index] = None
        else:
            selector = self._data.output_selector
            output = done.variables.get(selector) if selector is not None else None
            self._outputs[done.index] = output
        if self._error is not None:
            return Rounds()
        return Rounds(self._take(1, output))

    def result(self) -> NodeResult:
        if self._error is not None:
            raise self._error  # Dify fails the iteration with the round's error
        outputs = [self._outputs[i] for i in sorted(self._outputs)]
        if self._data.flatten_output:
            outputs = _flattened(outputs)
        return NodeResult(outputs={"output": outputs}, inputs=self.inputs)


def _flattened(outputs: list[Any]) -> list[Any]:
    """Dify's flattening: when every output that is not None is a list, one list."""
    present = [o for o in outputs if o is not None]
    if not present or not all(isinstance(o, list) for o in present):
        return outputs
    return [item for output in present for item in output]


def _start(data: Data, ctx: NodeContext) -> _Iteration:
    items = ctx.variables.get(data.iterator_selector)
    if items is None:
        items = []  # nothing to iterate over: no round, the output is []
    if isinstance(items, File) or not isinstance(items, list | tuple):
        raise NodeRunError(
            "errors.iteration.notArray",
            selector=".".join(data.iterator_selector),
            got=type(items).__name__,
        )
    return _Iteration(data, list(items))


SPEC = NodeSpec(
    type="iteration",
    role=Role.CONTAINER,
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=False,
    container=ContainerSpec(
        kind="iteration",
        start=_start,
        round_root=_round_root,
        inner_names=_inner_names,
        writable=_writable,
        round_selectors=_round_selectors,
    ),
)
