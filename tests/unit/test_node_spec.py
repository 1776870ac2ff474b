"""Each node module's one `SPEC`: a misspelt or missing hook fails when the
spec is built (at import), never silently; the registry only collects them."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from firstgate.nodes import answer, end, iteration, round_start
from firstgate.nodes.base import SUCCESS_HANDLE, NodeResult, Role
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.registry import NODE_TYPES, SPECS
from firstgate.nodes.spec import NodeSpec

from firstgate import nodes


class Data(BaseNodeData):
    pass


def run(data: Any, ctx: Any) -> NodeResult:
    return NodeResult()


def test_a_misspelt_hook_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="handels"):
        NodeSpec(type="x", data_model=Data, run=run, handels=lambda data: {"a"})  # type: ignore[call-arg]


def test_a_spec_takes_keywords_only() -> None:
    with pytest.raises(TypeError):
        NodeSpec("x", (), Role.PLAIN, Data, run)  # type: ignore[misc]


def test_a_response_node_without_a_template_is_refused() -> None:
    with pytest.raises(TypeError, match="template"):
        NodeSpec(type="x", role=Role.RESPONSE, data_model=Data, run=run)
    NodeSpec(type="x", role=Role.RESPONSE, data_model=Data, run=run, template=lambda data: [])


def test_a_container_role_goes_with_a_container_spec() -> None:
    with pytest.raises(TypeError, match="ContainerSpec"):
        NodeSpec(type="x", role=Role.CONTAINER, data_model=Data, run=run)
    with pytest.raises(TypeError, match="ContainerSpec"):
        NodeSpec(type="x", data_model=Data, run=run, container=iteration.SPEC.container)


def test_only_a_round_start_may_leave_out_run() -> None:
    with pytest.raises(TypeError, match="no run"):
        NodeSpec(type="x", data_model=Data)
    with pytest.raises(RuntimeError):
        round_start.SPEC.run(None, None)  # type: ignore[arg-type]


def test_a_limit_per_workflow_is_at_least_one() -> None:
    with pytest.raises(TypeError, match="most_per_workflow"):
        NodeSpec(type="x", data_model=Data, run=run, most_per_workflow=0)
    assert NodeSpec(type="x", data_model=Data, run=run, most_per_workflow=1).most_per_workflow == 1


def test_the_defaults() -> None:
    spec = NodeSpec(type="x", data_model=Data, run=run)
    data = Data.model_validate({"type": "x"})
    assert spec.role is Role.PLAIN
    assert spec.aliases == ()
    assert not spec.inline and not spec.supports_retry
    assert spec.handles(data) == {SUCCESS_HANDLE}
    assert spec.selectors(data) == [] and spec.output_names(data) == set()
    assert spec.needs(data).model_providers == frozenset()
    assert spec.template is None and spec.default_handles is None and spec.container is None
    assert spec.most_per_workflow is None


def test_the_registry_is_every_node_modules_spec_by_type_and_alias() -> None:
    declared = []
    for info in pkgutil.iter_modules(nodes.__path__):
        module = importlib.import_module(f"firstgate.nodes.{info.name}")
        spec = getattr(module, "SPEC", None)
        if isinstance(spec, NodeSpec):
            declared.append(spec)
            # The old protocol's names are gone: the spec is the one declaration.
            for old in ("TYPE", "ALIASES", "ROLE", "SUPPORTS_RETRY", "INLINE", "CONTAINER"):
                assert not hasattr(module, old), f"{module.__name__}.{old}"
    assert {id(s) for s in declared} == {id(s) for s in SPECS}
    assert NODE_TYPES["loop-start"] is NODE_TYPES["iteration-start"] is round_start.SPEC
    assert NODE_TYPES["variable-assigner"] is NODE_TYPES["variable-aggregator"]
    assert NODE_TYPES["answer"] is answer.SPEC and NODE_TYPES["end"] is end.SPEC
    assert sorted(NODE_TYPES) == sorted(n for s in SPECS for n in (s.type, *s.aliases))
