"""Code node: Dify's `code` type. Runs `main` of untrusted Python or JavaScript
through the run's code executor (`ctx.code_executor`, never in this process)
and checks what it returned against the declared outputs (`nodes/code/outputs.py`).

    type: code
    code_language: python3            # or javascript
    code: "def main(x: int) -> dict:\n    return {'y': x + 1}"
    variables: [{variable: x, value_selector: [start, x]}]
    outputs: {y: {type: number, children: null}}

Python calls `main(**inputs)`, JavaScript `main(inputs)`; both must return an
object. Every failure is typed (`sandbox.errors` for running the code,
`nodes.code_outputs` for its result), so retry, fail-branch and default-value
apply as for any node.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from firstgate.common.dsl import DslModel
from firstgate.nodes.base import Needs, NodeContext, NodeResult, NodeRunError
from firstgate.nodes.code.outputs import check_outputs
from firstgate.nodes.config import BaseNodeData, SelectorField
from firstgate.nodes.selectors import Selector
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.values import jsonable
from pydantic import BeforeValidator, Field

CODE_NEEDS = Needs(code_executor=True)

OutputType = Literal[
    "string",
    "number",
    "boolean",
    "object",
    "array[string]",
    "array[number]",
    "array[object]",
    "array[boolean]",
]


def _unset_selector(value: Any) -> Any:
    # The editor writes `value_selector: []` for a variable nobody wired up;
    # Dify then passes None to main.
    return None if value in (None, [], ()) else value


class CodeVariable(DslModel):
    variable: str = Field(min_length=1)
    value_selector: Annotated[SelectorField | None, BeforeValidator(_unset_selector)] = None


class CodeOutput(DslModel):
    type: OutputType
    children: dict[str, CodeOutput] | None = None


class Data(BaseNodeData):
    code_language: Literal["python3", "javascript"]
    code: str = ""
    variables: list[CodeVariable] = Field(default_factory=list)
    outputs: dict[str, CodeOutput] = Field(default_factory=dict)
    # Dify's per-node package list; the sandbox offers what its interpreter has.
    dependencies: list[Any] | None = None


def selectors(data: Data) -> list[Selector]:
    return [v.value_selector for v in data.variables if v.value_selector is not None]


def output_names(data: Data) -> set[str]:
    return set(data.outputs)


def needs(data: Data) -> Needs:
    return CODE_NEEDS


def run(data: Data, ctx: NodeContext) -> NodeResult:
    executor = ctx.code_executor
    if executor is None:
        raise NodeRunError("errors.code.noExecutor")
    inputs = {
        v.variable: None
        if v.value_selector is None
        else jsonable(ctx.variables.get(v.value_selector))
        for v in data.variables
    }
    result = executor.execute(data.code_language, data.code, inputs, cancel=ctx.cancel)
    outputs = check_outputs(result, data.outputs, executor.output_limits)
    return NodeResult(outputs=outputs, process_data={"inputs": inputs})


def _never_twice(data: Any) -> bool:
    """Its effect is outside the run (a tool call; code that may reach the network
    through a sandbox service): a crash while it ran must not repeat it."""
    return False


SPEC = NodeSpec(
    type="code",
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=True,
    needs=needs,
    repeatable=_never_twice,
)
