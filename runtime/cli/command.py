"""`firstgate run FLOW.yml [--query TEXT] [--conversation ID] [--user ID]
[--input KEY=VALUE | --input KEY=@path] [--file PATH] [--env-file PATH]
[--state DB] [--models M.yaml] [--json] [--locale LOC] [--max-run-time S] [--max-steps N]`
`firstgate resume TOKEN [--action ID] [--input NAME=VALUE] [--flow FLOW.yml]`
and `firstgate validate FLOW.yml`.

Exit codes: 0 succeeded or partially succeeded, 1 failed or aborted (or the
output pipe closed), 2 invalid input (a bad flow file, models file, --input
or limit), 3 paused (the run waits for a human-input form: `firstgate
resume`), 130 a second Ctrl-C. User mistakes never print a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from firstgate.common.dsl import shown
from firstgate.common.files import FileError
from firstgate.common.problems import DslError
from firstgate.locales.localized_error import LocalizedError
from firstgate.nodes.human_input import form as forms
from firstgate.nodes.start import InputError
from firstgate.runtime import human_input
from firstgate.runtime.cli import human_input as hi_cli
from firstgate.runtime.cli import runs
from firstgate.runtime.cli.messages import render_error
from firstgate.runtime.cli.terminal import HumanView, json_line
from firstgate.runtime.execution import events as ev
from firstgate.runtime.execution.checkpoint import DEFAULT_BATCH_MS, CheckpointError, Durability
from firstgate.runtime.execution.engine import WorkflowRun
from firstgate.runtime.execution.environment import EnvVarError, read_env_file
from firstgate.runtime.execution.limits import (
    DEFAULT_MAX_RUN_SECONDS,
    DEFAULT_MAX_STEPS,
    LimitSettingError,
    RunLimits,
)
from firstgate.runtime.execution.resources import RunResources
from firstgate.runtime.execution.session import RunOptions
from firstgate.runtime.models.routes import RouteError
from firstgate.runtime.settings import load_settings
from firstgate.runtime.workflow import Workflow, load_workflow
from firstgate.store import StoreError, open_store
from firstgate.store.base import FormRecord, Store

from firstgate import locales

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
DEFAULT_CLI_USER = "cli-user"
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


class BadInputArgError(LocalizedError):
    message_key = "cli.badInputArg"


def parse_inputs(pairs: Sequence[str]) -> dict[str, str]:
    inputs: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInputArgError(got=shown(pair))
        if key.strip() in inputs:  # the second would silently win
            raise BadInputArgError("cli.repeatedInput", name=shown(key.strip()))
        inputs[key.strip()] = value
    return inputs


def _parser(more_commands: Sequence[tuple[str, str]] = ()) -> argparse.ArgumentParser:
    """The runtime's commands; `more_commands` ((name, help) pairs) are listed after them
    in `firstgate --help` (serve and worker: `firstgate` dispatches those before this parser)."""
    parser = argparse.ArgumentParser(
        prog="firstgate", description="Run, check and serve Dify-style workflows."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a workflow and stream its answer")
    run.add_argument("flow")
    run.add_argument("--input", "-i", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument(
        "--models",
        "--settings",
        metavar="SETTINGS.yaml",
        help="the runtime settings file: where each model provider is served, and more",
    )
    run.add_argument("--query", "-q", help="a chatflow's user message (sys.query)")
    run.add_argument("--conversation", metavar="ID", help="continue (or start) this conversation")
    run.add_argument("--user", metavar="ID", help="who is asking (sys.user_id)")
    run.add_argument(
        "--file", action="append", default=[], metavar="PATH", help="a file for sys.files"
    )
    run.add_argument("--env-file", metavar="PATH", help="NAME=value lines for env variables")
    run.add_argument(
        "--state", metavar="DB", help="the state database (default: the user's data directory)"
    )
    run.add_argument("--json", action="store_true", help="Dify's streaming events, one per line")
    run.add_argument("--locale", help="language of messages (default: from LANG)")
    run.add_argument(
        "--durability",
        choices=[d.value for d in Durability],
        default=Durability.BATCHED.value,
        help="when the run's state reaches the store: after every node, batched "
        f"(at most every --durability-ms, default {DEFAULT_BATCH_MS}), or at the end only",
    )
    run.add_argument("--durability-ms", type=int, default=DEFAULT_BATCH_MS, metavar="MS")
    _add_limit_arguments(run)
    resume = commands.add_parser(
        "resume", help="answer a paused run's human-input form and let the run go on"
    )
    resume.add_argument("token", help="the form's token (printed when the run paused)")
    resume.add_argument("--action", "-a", required=True, metavar="ID", help="the action chosen")
    resume.add_argument("--input", "-i", action="append", default=[], metavar="NAME=VALUE")
    resume.add_argument("--flow", help="the workflow file (default: the one the run came from)")
    resume.add_argument("--models", "--settings", metavar="SETTINGS.yaml")
    resume.add_argument("--state", metavar="DB")
    resume.add_argument("--json", action="store_true")
    resume.add_argument("--locale")
    _add_limit_arguments(resume)
    validate = commands.add_parser("validate", help="check a workflow file and list every problem")
    validate.add_argument("flow")
    validate.add_argument("--locale")
    validate.add_argument(
        "--models",
        "--settings",
        metavar="SETTINGS.yaml",
        help="check against the runtime settings too (e.g. the definitions of api tools)",
    )
    index = commands.add_parser(
        "index", help="build or update the local full-text index of a knowledge dataset"
    )
    index.add_argument("folder")
    index.add_argument("--dataset", required=True, help="the dataset id the workflow names")
    index.add_argument("--index", metavar="PATH", help="the index file (default: from settings)")
    index.add_argument("--models", "--settings", metavar="SETTINGS.yaml")
    index.add_argument("--locale")
    runs.add_parser(commands)
    for name, help_text in more_commands:
        commands.add_parser(name, help=f"{help_text} (see `firstgate {name} --help`)")
    return parser


def _add_limit_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--max-run-time",
        metavar="SECONDS",
        help=f"stop the run after this long (default {DEFAULT_MAX_RUN_SECONDS:g}; 0: no limit)",
    )
    run.add_argument(
        "--max-steps",
        metavar="N",
        help=f"stop the run after N node executions (default {DEFAULT_MAX_STEPS})",
    )


def _limits(args: argparse.Namespace) -> RunLimits:
    return RunLimits.from_text(args.max_steps, args.max_run_time)


def _invalid(error: BaseException, locale: str, as_json: bool) -> int:
    if as_json:
        # Dify's answer to a request it refuses: an error with code and status.
        print(
            json.dumps(
                {
                    "event": "error",
                    "status": 400,
                    "code": "invalid_param",
                    "message": str(error),
                    "error_type": type(error).__name__,
                },
                ensure_ascii=False,
            )
        )
    else:
        print(
            locales.t("cli.invalidInput", locale, error=render_error(error, locale)),
            file=sys.stderr,
        )
    return EXIT_INVALID


def _invalid_file(error: DslError, path: str, locale: str) -> int:
    print(
        locales.t("cli.invalidFlow", locale, path=path, count=len(error.problems)), file=sys.stderr
    )
    for problem in error.problems:
        print("  " + problem.render(locale), file=sys.stderr)
    return EXIT_INVALID


def cmd_validate(flow: str, locale: str, models: str | None = None) -> int:
    try:
        settings = load_settings(models) if models else None
        workflow = load_workflow(flow, settings=settings)
    except DslError as exc:
        return _invalid_file(exc, exc.source or flow, locale)
    for warning in workflow.warnings:  # what Dify loads too: reported, exit 0
        print(warning.render(locale))
    print(
        locales.t(
            "cli.valid",
            locale,
            path=flow,
            nodes=len(workflow.graph.all_nodes),
            edges=sum(len(g.edges) for g in workflow.graph.graphs()),
        )
    )
    return EXIT_OK


class ChatArgError(LocalizedError):
    """A chat flag where it does not belong, or a chatflow without its message."""


def _check_chat_args(workflow: Workflow, args: argparse.Namespace) -> None:
    if workflow.chat and args.query is None and "query" not in parse_inputs(args.input):
        raise ChatArgError("cli.chat.needsQuery")
    if not workflow.chat and (args.query is not None or args.conversation is not None):
        raise ChatArgError("cli.chat.notChat")


def _start_run(args: argparse.Namespace, resources: RunResources) -> tuple[Workflow, WorkflowRun]:
    workflow = load_workflow(args.flow, settings=resources.settings)
    _check_chat_args(workflow, args)
    env_file = read_env_file(args.env_file) if args.env_file else None
    options = RunOptions(
        query=args.query,
        conversation_id=args.conversation,
        user_id=args.user or DEFAULT_CLI_USER,
        files=args.file,
        env_file_values=env_file,
        limits=_limits(args),
        durability=Durability(args.durability),
        durability_batch_ms=args.durability_ms,
    )
    return workflow, workflow.run(parse_inputs(args.input), options, resources)


PAUSED = "paused"  # `WorkflowRun.status` of a run waiting at a node
FORM_REQUIRED = "human_input_required"
# Why a form cannot be answered or its run resumed: said, exit 2.
RESUME_ERRORS = (
    human_input.FormNotFound,
    human_input.FormSubmitted,
    human_input.FormExpired,
    forms.FormInvalid,
    FileError,
    CheckpointError,
)

INVALID_ERRORS = (
    DslError,
    InputError,
    RouteError,
    BadInputArgError,
    ChatArgError,
    EnvVarError,
    StoreError,
    LimitSettingError,
)


def cmd_run(args: argparse.Namespace, locale: str) -> int:
    # One run: its store and resources are opened here and closed when it ends.
    with contextlib.ExitStack() as opened:
        try:
            store = opened.enter_context(contextlib.closing(open_store(args.state)))
            settings = load_settings(args.models) if args.models else None
            resources = opened.enter_context(
                RunResources.open(settings, store=store, loader=load_workflow)
            )
            workflow, run = _start_run(args, resources)
        except INVALID_ERRORS as exc:
            if isinstance(exc, DslError) and not args.json:
                # Headed with the file the problems are in: the models file's own name for its problems.
                return _invalid_file(exc, exc.source or args.flow, locale)
            return _invalid(exc, locale, args.json)
        source = hi_cli.source_of(args.flow, args.models)
        return _until_done(run, workflow, resources, store, source, locale, args)


def _until_done(
    run: WorkflowRun,
    workflow: Workflow,
    resources: RunResources,
    store: Store,
    source: str,
    locale: str,
    args: argparse.Namespace,
) -> int:
    """Stream the run; when it pauses for a form, ask for the answer at a terminal
    and go on, else say how to answer it and exit `EXIT_PAUSED`."""
    while True:
        code, required = _stream(run, workflow, locale, args.json)
        if run.status != PAUSED:
            return code
        store.note_form_source(run.run_id, source)
        interactive = not args.json and sys.stdin.isatty() and sys.stdout.isatty()
        waiting = [r for r in required if r.get("form_token")]
        if not interactive or not waiting:
            for line in hi_cli.paused_lines(required, locale):
                print(line, file=sys.stderr)
            return hi_cli.EXIT_PAUSED
        closed = _ask_until_accepted(store, waiting[-1]["form_token"], locale)
        if closed is None:
            return hi_cli.EXIT_PAUSED
        run = human_input.resume(workflow, closed, resources, RunOptions(limits=_limits(args)))


def _ask_until_accepted(store: Store, token: str, locale: str) -> FormRecord | None:
    """The form answered at the terminal (asked again after a rejected answer);
    None when it closed meanwhile or the input ended."""
    while True:
        try:
            form = human_input.open_form(store, token)
            action, given = hi_cli.ask(form.definition, locale)
            return human_input.answer(store, form, action, given, hi_cli.file_input)
        except (human_input.FormSubmitted, human_input.FormExpired) as exc:
            print(render_error(exc, locale), file=sys.stderr)
            return None
        except (forms.FormInvalid, FileError) as exc:
            print(render_error(exc, locale), file=sys.stderr)
        except EOFError:
            return None


def cmd_resume(args: argparse.Namespace, locale: str) -> int:
    """`firstgate resume TOKEN --action ID [--input NAME=VALUE] [--flow FILE]`."""
    with contextlib.ExitStack() as opened:
        try:
            store = opened.enter_context(contextlib.closing(open_store(args.state)))
            form = human_input.open_form(store, args.token)
            flow, models = hi_cli.read_source(form.source)
            flow = args.flow or flow
            models = args.models or models
            if not flow:
                raise human_input.FormNotFound()
            settings = load_settings(models) if models else None
            resources = opened.enter_context(
                RunResources.open(settings, store=store, loader=load_workflow)
            )
            workflow = load_workflow(flow, settings=settings)
            given = hi_cli.command_line_inputs(parse_inputs(args.input), form.definition)
            closed = human_input.answer(store, form, args.action, given, hi_cli.file_input)
            run = human_input.resume(workflow, closed, resources, RunOptions(limits=_limits(args)))
        except (*INVALID_ERRORS, *RESUME_ERRORS) as exc:
            return _invalid(exc, locale, args.json)
        source = hi_cli.source_of(flow, models)
        return _until_done(run, workflow, resources, store, source, locale, args)


def _stream(
    run: WorkflowRun, workflow: Workflow, locale: str, as_json: bool
) -> tuple[int, list[dict[str, Any]]]:
    """The run's events shown (or printed as JSON lines); its exit code, and the
    data of the forms it asked for (`human_input_required`)."""
    view = (
        None
        if as_json
        else HumanView(locale, calls_model=_calls_model(workflow), redactor=run.session.redactor)
    )
    final: ev.WorkflowFinished | None = None
    required: list[dict[str, Any]] = []
    try:
        with _ctrl_c_aborts(run):
            for event in run:  # after an abort the run still reports how it ended
                if view is None:
                    print(json_line(event), flush=True)
                else:
                    view.show(event)
                if isinstance(event, ev.WorkflowFinished):
                    final = event
                elif isinstance(event, ev.NodeAnnounced) and event.event == FORM_REQUIRED:
                    required.append(event.fields)
    finally:
        run.close()  # cut short (a closed pipe, a second Ctrl-C): streams and servers stop now
    if isinstance(final, ev.WorkflowSucceeded | ev.WorkflowPartialSucceeded):
        return EXIT_OK, required
    return EXIT_FAILED, required


def _calls_model(workflow: Workflow) -> frozenset[str]:
    """Nodes that wait on a model server (the human view shows a waiting line)."""
    return frozenset(n.id for n in workflow.graph.all_nodes.values() if n.needs.model_providers)


@contextlib.contextmanager
def _ctrl_c_aborts(run: WorkflowRun) -> Iterator[None]:
    """Ctrl-C aborts the run (cancelling in-flight streams) instead of raising
    KeyboardInterrupt inside the event iterator, which would end the iteration
    before the run could report its end. A second Ctrl-C interrupts at once."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield  # not ours to take over (embedded, or Ctrl-C deliberately ignored)
        return

    def on_ctrl_c(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # Not inline: the handler may run while this thread holds a lock abort needs.
        threading.Thread(target=run.abort, args=("interrupted",), daemon=True).start()

    signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def cmd_index(args: argparse.Namespace, locale: str) -> int:
    """`firstgate index DIR --dataset ID [--index PATH | --models SETTINGS]`."""
    from firstgate.connectors.knowledge import KnowledgeError
    from firstgate.connectors.local_index import LocalIndex

    path = args.index
    try:
        if path is None and args.models:
            spec = load_settings(args.models).knowledge.datasets.get(args.dataset)
            if spec is not None and spec.kind == "local":
                path = spec.index
        if path is None:
            raise KnowledgeError("errors.knowledge.noIndexPath", dataset=args.dataset)
        index = LocalIndex(path, create=True)
        try:
            report = index.update(args.folder)
        finally:
            index.close()
    except (KnowledgeError, DslError) as exc:
        print(
            locales.t("cli.invalidInput", locale, error=render_error(exc, locale)), file=sys.stderr
        )
        return EXIT_INVALID
    print(
        locales.t(
            "cli.indexed",
            locale,
            dataset=args.dataset,
            index=str(path),
            added=report.added,
            updated=report.updated,
            removed=report.removed,
            unchanged=report.unchanged,
        )
    )
    return EXIT_OK


def main(
    argv: Sequence[str] | None = None, *, more_commands: Sequence[tuple[str, str]] = ()
) -> int:
    args = _parser(more_commands).parse_args(argv)
    locale = locales.normalize_locale(args.locale) if args.locale else locales.locale_from_env()
    try:
        if args.command == "validate":
            return cmd_validate(args.flow, locale, args.models)
        if args.command == "index":
            return cmd_index(args, locale)
        if args.command == "resume":
            return cmd_resume(args, locale)
        if args.command == "runs":
            return runs.cmd_runs(args, locale)
        return cmd_run(args, locale)
    except BrokenPipeError:
        # The reader went away (`| head`): nothing more can be shown. Point stdout
        # at /dev/null so that the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except KeyboardInterrupt:
        # A second Ctrl-C (the first aborts the run and lets it report): stop now, quietly.
        print(locales.t("cli.interrupted", locale), file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
