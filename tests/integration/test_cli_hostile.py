"""`firstgate` against hostile or broken files and arguments: exit 2 with a
message that names what was wrong and where, never a traceback, never a
value written out in full."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from firstgate.common.yaml_reader import MAX_BYTES, MAX_DEPTH
from firstgate.runtime.cli.terminal import json_line
from firstgate.runtime.execution import events as ev

from tests.fakes import llm_server as fake
from tests.integration.test_cli import EXAMPLES, ROOT, firstgate, models_file
from tests.integration.test_cli_interrupt import start_cli

CHAT = str(EXAMPLES / "chat.yml")


def assert_clean_exit_2(result: object, *needles: str) -> str:
    stderr = result.stderr  # type: ignore[attr-defined]
    assert result.returncode == 2, (result.returncode, stderr[-2000:])  # type: ignore[attr-defined]
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in stderr, stderr[-2000:]
    return stderr


# --- the models file --------------------------------------------------------------


def test_a_models_file_that_is_not_utf8_is_named_and_located(tmp_path: Path) -> None:
    models = tmp_path / "models.yaml"
    models.write_bytes(b"providers:\n  x: {kind: local}\ndefault: caf\xe9\n")
    stderr = assert_clean_exit_2(
        firstgate("run", CHAT, "--input", "query=hi", "--models", str(models)),
        f"{models} has 1 problem(s):",
        f"{models}, line 3, column 13: the text is not UTF-8",
    )
    assert f"{CHAT} has" not in stderr  # headed with the models file, not the flow


def test_a_models_file_that_is_a_directory(tmp_path: Path) -> None:
    assert_clean_exit_2(
        firstgate("run", CHAT, "--input", "query=hi", "--models", str(tmp_path)),
        f"{tmp_path} has 1 problem(s):",
        f"{tmp_path} is a directory, not a file",
    )


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("providers:\n  x: {kind: nope}\ndefault: x\n", "providers.x.kind"),
        ("- local\n", "does not contain a models file"),
    ],
)
def test_models_file_problems_are_headed_with_its_own_name(
    tmp_path: Path, body: str, needle: str
) -> None:
    models = tmp_path / "models.yaml"
    models.write_text(body, encoding="utf-8")
    assert_clean_exit_2(
        firstgate("run", CHAT, "--input", "query=hi", "--models", str(models)),
        f"{models} has 1 problem(s):",
        needle,
    )


# --- hostile workflow files --------------------------------------------------------


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_small_file_nested_600_deep(tmp_path: Path, command: str) -> None:
    flow = tmp_path / "deep.yml"
    flow.write_text("app: {mode: workflow, name: " + "[" * 600 + "]" * 600 + "}\n")
    assert flow.stat().st_size < 1500
    assert_clean_exit_2(firstgate(command, str(flow)), f"nested more than {MAX_DEPTH} levels deep")


def test_a_file_over_the_size_limit(tmp_path: Path) -> None:
    flow = tmp_path / "big.yml"
    with flow.open("w", encoding="utf-8") as file:
        file.write("app:\n  name: '")
        chunk = "x" * 1_000_000
        for _ in range(50):  # 50 MB
            file.write(chunk)
        file.write("'\n")
    assert_clean_exit_2(
        firstgate("validate", str(flow)), f"is larger than the limit of {MAX_BYTES} bytes"
    )


def test_an_alias_bomb_is_refused_with_a_short_message(tmp_path: Path) -> None:
    levels = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    flow = tmp_path / "bomb.yml"
    flow.write_text(
        "defs:\n  " + "\n  ".join(levels) + "\napp: {mode: workflow, name: *a9}\n",
        encoding="utf-8",
    )
    assert flow.stat().st_size < 1200
    stderr = assert_clean_exit_2(
        firstgate("run", str(flow)), "its aliases would make the document larger"
    )
    assert len(stderr) < 600


def test_duplicate_keys_in_a_workflow_file(tmp_path: Path) -> None:
    text = (EXAMPLES / "chat.yml").read_text(encoding="utf-8")
    flow = tmp_path / "dup.yml"
    flow.write_text(text.replace("kind: app\n", "kind: app\nkind: app\n", 1), encoding="utf-8")
    assert_clean_exit_2(firstgate("validate", str(flow)), 'duplicate key "kind"')


# --- inputs and arguments -------------------------------------------------------------


def number_flow(tmp_path: Path) -> str:
    flow = tmp_path / "numbers.yml"
    flow.write_text(
        """kind: app
app: {mode: workflow, name: numbers}
workflow:
  graph:
    nodes:
      - id: start
        data:
          type: start
          title: Start
          variables:
            - {variable: n, type: number, required: true}
            - {variable: doc, type: json_object}
      - id: end
        data:
          type: end
          title: End
          outputs: [{variable: n, value_selector: [start, n]}]
    edges: [{source: start, target: end}]
""",
        encoding="utf-8",
    )
    return str(flow)


@pytest.mark.parametrize("value", ["1e999", "-1e999", "nan", "inf", "Infinity"])
def test_non_finite_numbers_are_refused(tmp_path: Path, value: str) -> None:
    assert_clean_exit_2(
        firstgate("run", number_flow(tmp_path), "--input", f"n={value}"),
        'input "n" must be a finite number',
    )


def test_a_json_input_nested_5000_deep(tmp_path: Path) -> None:
    deep = "[" * 5000 + "]" * 5000
    for value in ('{"a": ' + deep + "}", '{"a": ' + "[" * 300 + "]" * 300 + "}"):
        assert_clean_exit_2(
            firstgate("run", number_flow(tmp_path), "--input", "n=1", "--input", f"doc={value}"),
            f'input "doc" is nested more than {MAX_DEPTH} levels deep',
        )


def test_json_constants_that_are_not_json_are_refused(tmp_path: Path) -> None:
    assert_clean_exit_2(
        firstgate("run", number_flow(tmp_path), "--input", "n=1", "--input", 'doc={"x": NaN}'),
        'input "doc" must be a JSON object',
    )


def test_a_repeated_input_is_refused(tmp_path: Path) -> None:
    assert_clean_exit_2(
        firstgate("run", number_flow(tmp_path), "--input", "n=1", "--input", "n=2"),
        '--input "n" is given more than once',
    )


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--max-steps", "0"], "the step limit (--max-steps, max_steps) must be a whole number"),
        (["--max-steps", "ten"], "the step limit"),
        (["--max-run-time", "-1"], "the time limit (--max-run-time, max_run_seconds)"),
        (["--max-run-time", "soon"], "the time limit"),
        (["--max-run-time", "inf"], "the time limit"),
    ],
)
def test_bad_run_limits_are_refused(tmp_path: Path, flags: list[str], needle: str) -> None:
    assert_clean_exit_2(firstgate("run", number_flow(tmp_path), "--input", "n=1", *flags), needle)


# --- what validate sees ----------------------------------------------------------------


def template_flow(tmp_path: Path, template: str) -> str:
    flow = tmp_path / "template.yml"
    document = yaml.safe_load((EXAMPLES / "if_else_template.yml").read_text(encoding="utf-8"))
    for node in document["workflow"]["graph"]["nodes"]:
        if node["data"]["type"] == "template-transform":
            node["data"]["template"] = template
    flow.write_text(yaml.safe_dump(document), encoding="utf-8")
    return str(flow)


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("{{ unclosed", "template is not a valid Jinja2 template: "),
        ('{% include "other.txt" %}', "template uses {% include %}, but a template cannot load"),
        ('{% import "m" as m %}', "template uses {% import %}"),
        ("{{ x.__class__ }}", 'template reads "__class__", which templates may not read'),
    ],
)
def test_validate_compiles_templates(tmp_path: Path, template: str, needle: str) -> None:
    assert_clean_exit_2(firstgate("validate", template_flow(tmp_path, template)), needle)


def test_duplicate_start_variables_and_an_empty_node_id(tmp_path: Path) -> None:
    flow = number_flow(tmp_path)
    text = Path(flow).read_text(encoding="utf-8")
    Path(flow).write_text(text.replace("variable: doc,", "variable: n,"), encoding="utf-8")
    assert_clean_exit_2(firstgate("validate", flow), 'declares the input "n" more than once')
    Path(flow).write_text(text.replace("- id: end", "- id: ''"), encoding="utf-8")
    assert_clean_exit_2(firstgate("validate", flow), "workflow.graph.nodes[1].id must not be empty")


# --- output -----------------------------------------------------------------------------


def strict_lines(stdout: str) -> list[dict[str, object]]:
    def refuse(name: str) -> object:
        raise AssertionError(f"{name} is not JSON")

    return [json.loads(line, parse_constant=refuse) for line in stdout.splitlines() if line]


def test_json_output_never_prints_infinity(tmp_path: Path) -> None:
    flow = tmp_path / "inf.yml"
    flow.write_text(
        """kind: app
app: {mode: workflow, name: inf}
workflow:
  environment_variables:
    - {name: huge, value: .inf, value_type: number}
    - {name: odd, value: .nan, value_type: number}
  graph:
    nodes:
      - {id: start, data: {type: start, title: Start}}
      - id: end
        data:
          type: end
          title: End
          outputs:
            - {variable: huge, value_selector: [env, huge]}
            - {variable: odd, value_selector: [env, odd]}
    edges: [{source: start, target: end}]
""",
        encoding="utf-8",
    )
    # A non-finite number is not a value a DSL number may take: refused at load,
    # and the refusal itself is strict JSON.
    result = firstgate("run", str(flow), "--json")
    assert result.returncode == 2, result.stderr
    [line] = strict_lines(result.stdout)
    assert line["event"] == "error" and "Infinity" in str(line["message"])
    # Whatever else carries one (a tool's JSON, a plugin's variable) is written as null.
    event = ev.WorkflowSucceeded(
        run=ev.RunInfo(
            task_id="t",
            workflow_run_id="r",
            workflow_id="w",
            app_id="a",
            mode="workflow",
            user_id="u",
            created_at=0,
        ),
        elapsed=0.0,
        outputs={"huge": math.inf, "odd": [math.nan]},
    )
    [written] = strict_lines(json_line(event))
    assert written["data"]["outputs"] == {"huge": None, "odd": [None]}  # type: ignore[index]


HOSTILE_TOKENS = ["Hi \x1b[2J\x1b[H", "\x1b]0;pwned\x07there", "\r\x9b31mred\u202eevil\x7f"]


def test_control_characters_from_the_model_are_neutralised_for_people_only(
    tmp_path: Path,
) -> None:
    with fake.FakeLLMServer(fake.tokens(HOSTILE_TOKENS)) as server:
        models = models_file(tmp_path, server, probe="off")
        human = firstgate("run", CHAT, "--input", "query=hi", "--models", str(models))
        as_json = firstgate("run", CHAT, "--input", "query=hi", "--models", str(models), "--json")
    assert human.returncode == 0, human.stderr
    for raw in ("\x1b", "\x07", "\x9b", "\u202e", "\x7f", "\r"):
        assert raw not in human.stdout and raw not in human.stderr, repr(raw)
    assert "Hi ␛[2J␛[H␛]0;pwned␇there\\x9b31mred\\u202eevil\u2421" in human.stdout
    # Dify's chunks: a chatflow's `message` has the text as `answer`, a
    # workflow's `text_chunk` as `data.text`.
    streamed = "".join(
        str(e["answer"] if e["event"] == "message" else e["data"]["text"])  # type: ignore[index]
        for e in strict_lines(as_json.stdout)
        if e["event"] in ("text_chunk", "message")
    )
    assert streamed == "".join(HOSTILE_TOKENS)


def test_a_closed_pipe_ends_the_run_without_a_traceback(tmp_path: Path) -> None:
    # `firstgate run ... --json | head -1`: thousands of lines, the reader leaves after one.
    with fake.FakeLLMServer(fake.tokens(["token "] * 5000)) as server:
        models = models_file(tmp_path, server, probe="off")
        proc = start_cli("run", CHAT, "--input", "query=hi", "--models", str(models), "--json")
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
        code = proc.wait(timeout=30)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-2000:]
    assert code == 1


SLOW_ABORT = """
import sys, time
import firstgate.runtime.execution.engine as engine
abort = engine.WorkflowRun.abort
def slow_abort(self, reason="workflow aborted"):
    time.sleep(5)  # the first Ctrl-C's abort is still on its way when the second comes
    abort(self, reason)
engine.WorkflowRun.abort = slow_abort
from firstgate.runtime.cli.command import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_second_ctrl_c_stops_at_once_without_a_traceback(tmp_path: Path) -> None:
    with fake.FakeLLMServer(fake.pings(0.1, 20)) as server:
        models = models_file(tmp_path, server, probe="off")
        proc = subprocess.Popen(
            [sys.executable, "-c", SLOW_ABORT, "run", CHAT, "--input", "query=hi"]
            + ["--models", str(models)],
            cwd=ROOT,
            env={**os.environ, "LANG": "C"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        deadline = time.monotonic() + 20
        while not server.requests:  # the LLM request is in flight
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # the first Ctrl-C only started the abort
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        took = time.monotonic() - started
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
    assert err.strip().endswith("Interrupted.")
    assert proc.returncode == 130
    assert took < 3  # at once, not after the slow abort


def test_run_limits_from_the_command_line_stop_the_run(tmp_path: Path) -> None:
    with fake.FakeLLMServer(fake.pings(0.1, 20)) as server:
        models = str(models_file(tmp_path, server, probe="off"))
        started = time.monotonic()
        timed = firstgate(
            "run", CHAT, "--input", "query=hi", "--models", models, "--max-run-time", "1"
        )
        took = time.monotonic() - started
        stepped = firstgate(
            "run", CHAT, "--input", "query=hi", "--models", models, "--max-steps", "1"
        )
    assert timed.returncode == 1 and "the run exceeded its time limit of 1 s" in timed.stdout
    assert took < 15  # the stream (20 s of pings) was cut, not waited out
    assert stepped.returncode == 1
    assert "the run exceeded its limit of 1 node executions" in stepped.stdout
