"""The command line's side of a paused run: a human-input form at a terminal,
the "paused" line and exit code otherwise, and `firstgate resume TOKEN`.

At a terminal (stdin and stdout both), `firstgate run` shows the form (its
content, each input with its default or options, the actions) and reads the
answer: a rejected answer is said and asked again, an accepted one closes the
form and the run goes on in the same process. Anywhere else the run's forms
are printed with their tokens (`cli.humanInput.paused`) and the command exits
with `EXIT_PAUSED`; `firstgate resume TOKEN --action ID [--input NAME=VALUE]`
answers the form later, in any process that reaches the same state database
(a file input takes `@path` or `@https://...`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from firstgate.common import files
from firstgate.nodes.human_input import form as forms
from firstgate.runtime.cli.terminal import terminal_safe

from firstgate import locales

EXIT_PAUSED = 3  # the run waits for a human-input form (`firstgate resume` goes on)


def source_of(flow: str, models: str | None) -> str:
    """What `resume` needs to find the run's workflow again (`FormRecord.source`)."""
    return json.dumps(
        {
            "flow": str(Path(flow).resolve()),
            "models": str(Path(models).resolve()) if models else None,
        }
    )


def read_source(source: str | None) -> tuple[str | None, str | None]:
    try:
        found = json.loads(source or "{}")
    except ValueError:
        return None, None
    return found.get("flow"), found.get("models")


def paused_lines(required: Sequence[Mapping[str, Any]], locale: str) -> list[str]:
    """One line per form the run waits on: its token and the command that answers it."""
    lines = []
    for data in required:
        node = terminal_safe(str(data.get("node_title") or data.get("node_id")))
        token = data.get("form_token")
        if token:
            lines.append(locales.t("cli.humanInput.paused", locale, node=node, token=token))
        else:
            lines.append(locales.t("cli.humanInput.emailOnly", locale, node=node))
    return lines


def file_input(value: Any, item: Mapping[str, Any]) -> Any:
    """A file input's answer on the command line: `@path`, `@https://...`, or a
    file mapping; checked against the input's rules."""
    if isinstance(value, str):
        found = files.from_reference(value)
    elif isinstance(value, Mapping):
        found = files.from_mapping(value)
    else:
        raise forms.FormInvalid("errors.humanInput.notFiles", name=item["output_variable_name"])
    rules = files.FileRules.from_config(
        item.get("allowed_file_types", ()),
        item.get("allowed_file_extensions", ()),
        item.get("allowed_file_upload_methods", ()),
    )
    rules.check(found)
    return found


def command_line_inputs(pairs: Mapping[str, str], definition: Mapping[str, Any]) -> dict[str, Any]:
    """`--input` values as the form takes them: a file-list's paths split on commas."""
    kinds = {i["output_variable_name"]: i["type"] for i in definition["inputs"]}
    given: dict[str, Any] = {}
    for name, value in pairs.items():
        if kinds.get(name) == "file-list":
            given[name] = [part.strip() for part in value.split(",") if part.strip()]
        else:
            given[name] = value
    return given


def ask(
    definition: Mapping[str, Any],
    locale: str,
    read: Callable[[str], str] = input,
    out: TextIO = sys.stdout,
) -> tuple[str, dict[str, Any]]:
    """Show the form and read one answer (not checked here: `answer` does it)."""
    title = terminal_safe(str(definition.get("node_title") or definition["node_id"]))
    print(f"\n== {title} ==", file=out)
    content = forms.OUTPUT_PLACE.sub(lambda m: f"[{m.group(1)}]", str(definition["form_content"]))
    print(terminal_safe(content), file=out)
    defaults = definition.get("resolved_default_values", {})
    given: dict[str, Any] = {}
    for item in definition["inputs"]:
        name = item["output_variable_name"]
        kind = item["type"]
        if kind == "select":
            options = item["option_source"]["value"]
            for number, option in enumerate(options, 1):
                print(f"  {number}. {terminal_safe(str(option))}", file=out)
            reply = read(f"{name}: ").strip()
            if reply.isdigit() and 1 <= int(reply) <= len(options):
                reply = options[int(reply) - 1]
            given[name] = reply
        elif kind in ("file", "file-list"):
            reply = read(f"{name} (@path): ").strip()
            if reply:
                given[name] = (
                    [p.strip() for p in reply.split(",") if p.strip()]
                    if kind == "file-list"
                    else reply
                )
        else:
            default = str(defaults.get(name, ""))
            shown = f" [{terminal_safe(default[:60])}]" if default else ""
            reply = read(f"{name}{shown}: ")
            if reply:
                given[name] = reply
    actions = [a["id"] for a in definition["actions"]]
    print(locales.t("cli.humanInput.expires", locale, time=_when(definition)), file=out)
    action = read(
        locales.t("cli.humanInput.chooseAction", locale, actions=", ".join(actions)) + ": "
    )
    return action.strip(), given


def _when(definition: Mapping[str, Any]) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(definition["expiration_time"])))
