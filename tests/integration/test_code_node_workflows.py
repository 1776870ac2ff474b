"""Code nodes in whole workflows: Dify-shaped fixtures, error strategies, the
next code node after a failing one, abort, settings, validation."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from firstgate.runtime import DslError, RunResources, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import RuntimeSettings
from firstgate.sandbox.process_pool import ProcessSandbox

from tests.integration.sandbox_support import HAS_NODE, small_sandbox

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "workflows"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessSandbox]:
    with small_sandbox() as started:
        yield started


def node(node_id: str, node_type: str, **data: Any) -> dict[str, Any]:
    return {"id": node_id, "data": {"type": node_type, "title": node_id, **data}}


def code_node(node_id: str, code: str, outputs: dict[str, str], **data: Any) -> dict[str, Any]:
    data.setdefault("code_language", "python3")
    return node(
        node_id,
        "code",
        code=code,
        outputs={name: {"type": kind, "children": None} for name, kind in outputs.items()},
        **data,
    )


def edge(source: str, target: str, handle: str = "source") -> dict[str, Any]:
    return {"source": source, "target": target, "sourceHandle": handle}


def flow(
    nodes: list[dict[str, Any]],
    edges: list[dict[str, Any]],
    variables: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    start = node("start", "start", variables=variables or [])
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "t", "mode": "workflow"},
        "workflow": {"graph": {"nodes": [start, *nodes], "edges": edges}},
    }


def run(document: Any, inputs: dict[str, Any], pool: ProcessSandbox) -> list[ev.Event]:
    with RunResources.open(code_executor=pool) as resources:
        return list(load_workflow(document).run(inputs, resources=resources))


def final(events: list[ev.Event]) -> ev.WorkflowFinished:
    return next(e for e in reversed(events) if isinstance(e, ev.WorkflowFinished))


@pytest.mark.parametrize(
    ("gate", "expected"),
    [
        (1, {"left": "left ran", "middle": "middle ran", "right": None}),
        (0, {"left": None, "middle": "middle ran", "right": "right ran"}),
    ],
)
def test_branching_code_fixture_gives_difys_outputs(
    pool: ProcessSandbox, gate: int, expected: dict[str, Any]
) -> None:
    events = run(FIXTURES / "code_branches.yml", {"gate": gate}, pool)
    assert isinstance(final(events), ev.WorkflowSucceeded)
    assert final(events).outputs == expected
    ran = {e.node_id for e in events if isinstance(e, ev.NodeSucceeded) and e.node_type == "code"}
    assert ran == {k for k, v in expected.items() if v is not None}


def test_compact_code_fixture_adds_one(pool: ProcessSandbox) -> None:
    events = run(FIXTURES / "code_add_one.yml", {"count": 41}, pool)
    assert isinstance(final(events), ev.WorkflowSucceeded)
    assert final(events).outputs == {"total": 42}


def test_compact_template_fixture_renders_without_starting_the_sandbox() -> None:
    run_ = load_workflow(FIXTURES / "template_salute.yml").run({"who": "Ada"})
    events = list(run_)
    assert isinstance(final(events), ev.WorkflowSucceeded)
    assert final(events).outputs == {"said": "Greetings, Ada."}
    assert not run_.resources.code_executor._started  # type: ignore[union-attr]


def test_code_chain_passes_typed_values_between_python_and_javascript(pool: ProcessSandbox) -> None:
    if not HAS_NODE:
        pytest.skip("Node.js is not installed")
    document = flow(
        [
            code_node(
                "py",
                "def main(text: str) -> dict:\n"
                "    words = text.split()\n"
                "    return {'counts': {w: len(w) for w in words}, 'total': len(words)}\n",
                {"counts": "object", "total": "number"},
                variables=[{"variable": "text", "value_selector": ["start", "text"]}],
            ),
            code_node(
                "js",
                "function main({counts, total}) {\n"
                "  const longest = Object.keys(counts).sort((a, b) => counts[b] - counts[a])[0];\n"
                "  return {longest, n: total}\n"
                "}",
                {"longest": "string", "n": "number"},
                code_language="javascript",
                variables=[
                    {"variable": "counts", "value_selector": ["py", "counts"]},
                    {"variable": "total", "value_selector": ["py", "total"]},
                ],
            ),
            node(
                "end",
                "end",
                outputs=[
                    {"variable": "longest", "value_selector": ["js", "longest"]},
                    {"variable": "n", "value_selector": ["js", "n"]},
                ],
            ),
        ],
        [edge("start", "py"), edge("py", "js"), edge("js", "end")],
        [{"variable": "text", "label": "text", "type": "paragraph"}],
    )
    events = run(document, {"text": "a sandbox for every code node"}, pool)
    assert isinstance(final(events), ev.WorkflowSucceeded)
    assert final(events).outputs == {"longest": "sandbox", "n": 6}


HOSTILE = {
    "fork bomb": (
        "import os\ndef main():\n    while True:\n        os.fork()\n",
        "CodeSandboxViolationError",
    ),
    "infinite loop": ("def main():\n    while True:\n        pass\n", "CodeTimeoutError"),
    "memory hog": (
        "def main():\n    x = [bytearray(2**24) for _ in range(1000)]\n",
        "CodeResourceLimitError",
    ),
    "network": (
        "import socket\ndef main():\n    socket.create_connection(('127.0.0.1', 9))\n",
        "CodeSandboxViolationError",
    ),
    "environment": (
        "def main():\n    return {'r': open('/proc/1/environ').read()}\n",
        "CodeExecutionError",
    ),
    "huge file": (
        "def main():\n    open('f', 'wb').write(b'x' * 2**30)\n",
        "CodeResourceLimitError",
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_code_fails_into_the_fail_branch_and_the_next_code_node_runs(
    pool: ProcessSandbox, name: str
) -> None:
    code, error_type = HOSTILE[name]
    document = flow(
        [
            code_node("hostile", code, {"r": "string"}, error_strategy="fail-branch"),
            code_node(
                "after",
                "def main(kind: str) -> dict:\n    return {'seen': 'caught ' + kind}\n",
                {"seen": "string"},
                variables=[{"variable": "kind", "value_selector": ["hostile", "error_type"]}],
            ),
            node("end", "end", outputs=[{"variable": "seen", "value_selector": ["after", "seen"]}]),
        ],
        [edge("start", "hostile"), edge("hostile", "after", "fail-branch"), edge("after", "end")],
    )
    events = run(document, {}, pool)
    exceptions = [e for e in events if isinstance(e, ev.NodeException)]
    assert [e.error_type for e in exceptions] == [error_type]
    assert isinstance(final(events), ev.WorkflowPartialSucceeded)
    assert final(events).outputs == {"seen": f"caught {error_type}"}


def test_default_value_strategy_fills_in_after_a_code_error(pool: ProcessSandbox) -> None:
    document = flow(
        [
            code_node(
                "bad",
                "def main():\n    return {'n': 1 / 0}\n",
                {"n": "number"},
                error_strategy="default-value",
                default_value=[{"key": "n", "type": "number", "value": 7}],
            ),
            node(
                "end",
                "end",
                outputs=[
                    {"variable": "n", "value_selector": ["bad", "n"]},
                    {"variable": "why", "value_selector": ["bad", "error_type"]},
                ],
            ),
        ],
        [edge("start", "bad"), edge("bad", "end")],
    )
    events = run(document, {}, pool)
    assert final(events).outputs == {"n": 7, "why": "CodeExecutionError"}


def test_retry_runs_the_code_again(pool: ProcessSandbox) -> None:
    # Each attempt runs in a fresh process; every one fails, so both retries happen.
    document = flow(
        [
            code_node(
                "flaky",
                "def main():\n    raise ValueError('always')\n",
                {"x": "string"},
                retry_config={"retry_enabled": True, "max_retries": 2, "retry_interval": 10},
            ),
        ],
        [edge("start", "flaky")],
    )
    events = run(document, {}, pool)
    retries = [e for e in events if isinstance(e, ev.NodeRetry)]
    assert [r.attempt for r in retries] == [1, 2]
    assert all(r.error_type == "CodeExecutionError" for r in retries)
    assert isinstance(final(events), ev.WorkflowFailed)


def test_output_validation_errors_are_node_errors(pool: ProcessSandbox) -> None:
    document = flow(
        [
            code_node(
                "c",
                "def main():\n    return {'r': 5}\n",
                {"r": "string"},
                error_strategy="fail-branch",
            )
        ],
        [edge("start", "c")],
    )
    events = run(document, {}, pool)
    (exception,) = [e for e in events if isinstance(e, ev.NodeException)]
    assert exception.error_type == "OutputValidationError"
    assert "r must be of type string" in exception.error_message


def test_abort_stops_a_running_code_node_at_once(pool: ProcessSandbox) -> None:
    document = flow(
        [code_node("slow", "import time\ndef main():\n    time.sleep(60)\n", {"x": "string"})],
        [edge("start", "slow")],
    )
    events: list[ev.Event] = []
    with RunResources.open(code_executor=pool) as resources:
        workflow_run = load_workflow(document).run({}, resources=resources)
        for event in workflow_run:
            events.append(event)
            if isinstance(event, ev.NodeStarted) and event.node_id == "slow":
                threading.Timer(0.2, workflow_run.abort).start()
                started = time.monotonic()
    assert isinstance(final(events), ev.WorkflowStopped)
    assert time.monotonic() - started < 30  # not the 60 s sleep
    assert pool.execute("python3", "def main():\n    return {'ok': 1}\n", {}) == {"ok": 1}


def test_unwired_variables_arrive_as_none(pool: ProcessSandbox) -> None:
    document = flow(
        [
            code_node(
                "c",
                "def main(arg1, arg2) -> dict:\n    return {'r': repr((arg1, arg2))}\n",
                {"r": "string"},
                variables=[
                    {"variable": "arg1", "value_selector": []},
                    {"variable": "arg2", "value_selector": []},
                ],
            ),
            node("end", "end", outputs=[{"variable": "r", "value_selector": ["c", "r"]}]),
        ],
        [edge("start", "c"), edge("c", "end")],
    )
    assert final(run(document, {}, pool)).outputs == {"r": "(None, None)"}


def test_dsl_mistakes_in_a_code_node_are_located() -> None:
    document = flow(
        [node("c", "code", code_language="ruby", code="", outputs={"r": {"type": "array[file]"}})],
        [edge("start", "c")],
    )
    with pytest.raises(DslError) as caught:
        load_workflow(document)
    text = str(caught.value)
    assert "code_language" in text and "ruby" in text
    assert "outputs.r.type" in text


def test_settings_section_configures_the_run_owned_executor() -> None:
    settings = RuntimeSettings.model_validate(
        {
            "code_executor": {
                "workers": 1,
                "timeout_s": 2,
                "cpu_s": 1,
                "memory_mb": 64,
                "output_limits": {"max_string_length": 5},
            }
        }
    )
    document = flow(
        [
            code_node(
                "c",
                "def main():\n    return {'r': 'toolong'}\n",
                {"r": "string"},
                error_strategy="fail-branch",
            )
        ],
        [edge("start", "c")],
    )
    run_ = load_workflow(document).run({}, settings=settings)
    executor = run_.resources.code_executor
    events = list(run_)
    (exception,) = [e for e in events if isinstance(e, ev.NodeException)]
    assert "longer than the limit of 5" in exception.error_message
    assert executor is not None and not executor._workers  # closed with the run  # type: ignore[attr-defined]


def test_cli_runs_a_code_workflow_with_a_settings_file(tmp_path: Path) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text("code_executor:\n  workers: 1\n  timeout_s: 5\n", encoding="utf-8")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "firstgate.runtime.cli.command",
            "run",
            str(FIXTURES / "code_add_one.yml"),
            "--input",
            "count=1",
            "--models",
            str(settings),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    last = json.loads(out.stdout.strip().splitlines()[-1])
    assert last["data"]["outputs"] == {"total": 2}


def test_the_run_warms_its_executor_up_before_the_first_code_node() -> None:
    document = flow(
        [
            node("first", "template-transform", template="ready"),
            code_node("c", "def main():\n    return {'r': 'ran'}\n", {"r": "string"}),
        ],
        [edge("start", "first"), edge("first", "c")],
    )
    run_ = load_workflow(document).run(
        {}, settings=RuntimeSettings.model_validate({"code_executor": {"workers": 1}})
    )
    executor = run_.resources.code_executor
    events = []
    for event in run_:
        events.append(event)
        if isinstance(event, ev.NodeStarted) and event.node_id == "first":
            # The code node cannot start before we pull more events; the pool must
            # already be coming up in the background.
            for _ in range(200):
                if executor._workers:  # type: ignore[union-attr]
                    break
                time.sleep(0.05)
            assert executor._workers, "the pool was not started with the run"  # type: ignore[union-attr]
    assert isinstance(final(events), ev.WorkflowSucceeded)


def test_a_run_without_code_nodes_starts_no_process() -> None:
    document = flow([node("t", "template-transform", template="{{ 1 }}")], [edge("start", "t")])
    run_ = load_workflow(document).run({})
    events = list(run_)
    assert isinstance(final(events), ev.WorkflowSucceeded)
    assert not run_.resources.code_executor._started  # type: ignore[union-attr]
