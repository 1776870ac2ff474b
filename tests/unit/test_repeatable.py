"""Which nodes declare themselves unsafe to run twice (`NodeSpec.repeatable`): a
resumed run fails such a node that was in flight instead of repeating it."""

from __future__ import annotations

import pytest
from firstgate.nodes import code, http_request, tool
from firstgate.nodes.registry import SPECS


@pytest.mark.parametrize(
    ("method", "repeatable"),
    [
        ("get", True),
        ("head", True),
        ("put", True),
        ("delete", True),
        ("POST", False),
        ("patch", False),
    ],
)
def test_http_request_repeats_only_idempotent_methods(method: str, repeatable: bool) -> None:
    data = http_request.Data.model_construct(method=method)
    assert http_request.SPEC.repeatable(data) is repeatable


def test_tools_and_code_are_never_run_twice() -> None:
    assert tool.SPEC.repeatable(None) is False
    assert code.SPEC.repeatable(None) is False


def test_every_other_node_may_run_again() -> None:
    unsafe = {tool.SPEC.type, code.SPEC.type, http_request.SPEC.type}
    for spec in SPECS:
        if spec.type not in unsafe:
            assert spec.repeatable(None) is True, spec.type
