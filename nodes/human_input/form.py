"""A human-input form, from the node's data to the person's answer.

`open_form` makes the form a paused run waits on: the content with the run's
variables substituted (the `{{#$output.name#}}` places stay for the inputs),
each input with its resolved default or options, the actions, a token that
cannot be guessed, and the deadline. Its `definition` (plain JSON) is what is
kept (the store's form row, the run's checkpoint) and what every later step
reads: `check_submission` checks an answer against it (Dify's rules: an
action of the form, every select, file and file-list input given, a paragraph
optional), `answer_outputs` and `timeout_outputs` make the node's outputs and
branch handle, and the `*_notice`/`*_event` functions Dify's event data.
"""

from __future__ import annotations

import re
import secrets
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from firstgate.common.files import File, from_mapping, is_file_mapping
from firstgate.locales.localized_error import LocalizedError
from firstgate.nodes.base import NodeNotice, VariableReader
from firstgate.nodes.human_input.model import TIMEOUT_HANDLE, Data
from firstgate.nodes.values import as_text, render_text
from firstgate.store.base import FormRecord

ACTION_ID, ACTION_VALUE, RENDERED_CONTENT = "__action_id", "__action_value", "__rendered_content"
RESERVED_OUTPUTS = (ACTION_ID, ACTION_VALUE, RENDERED_CONTENT)
OUTPUT_PLACE = re.compile(r"\{\{#\$output\.([A-Za-z_][A-Za-z0-9_]{0,29})#\}\}")
# A paragraph answer longer than this is refused (it goes into prompts and the store).
MAX_PARAGRAPH_CHARS = 100_000
MAX_OPTIONS = 1_000
TOKEN_BYTES = 32


class FormInvalid(LocalizedError):
    """An answer the form refuses (Dify's `invalid_form_data`): the form stays open."""


@dataclass(frozen=True, slots=True)
class OpenedForm:
    definition: dict[str, Any]

    @property
    def token(self) -> str:
        return str(self.definition["form_token"])


def new_token() -> str:
    # A token is pasted into command lines (`firstgate resume TOKEN`): one
    # starting with "-" would be read as an option, so draw again.
    while True:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if not token.startswith("-"):
            return token


def _resolved_default(item: Any, variables: VariableReader) -> str:
    source = item.default_source
    if source is None:
        return ""
    if source.variable is not None:
        value = variables.get(source.variable)
        return "" if value is None else as_text(value)
    return "" if source.value is None else str(source.value)


def _resolved_options(item: Any, variables: VariableReader) -> list[str]:
    source = item.option_source
    if source is None:
        return []
    value = variables.get(source.variable) if source.variable is not None else source.value
    if not isinstance(value, list):
        return []
    return [as_text(v) for v in value][:MAX_OPTIONS]


def _shown_input(item: Any, variables: VariableReader) -> dict[str, Any]:
    """An input as Dify's form endpoints show it (a variable's options resolved)."""
    kind = "paragraph" if item.type == "text-input" else item.type
    shown: dict[str, Any] = {"type": kind, "output_variable_name": item.output_variable_name}
    if kind == "paragraph":
        source = item.default_source
        shown["default"] = (
            None
            if source is None
            else {
                "type": "variable" if source.variable else "constant",
                "selector": list(source.selector),
                "value": "" if source.variable else str(source.value or ""),
            }
        )
    elif kind == "select":
        source = item.option_source
        shown["option_source"] = {
            "type": source.type,
            "selector": list(source.selector),
            "value": _resolved_options(item, variables),
        }
    else:
        shown["allowed_file_types"] = list(item.allowed_file_types)
        shown["allowed_file_extensions"] = list(item.allowed_file_extensions)
        shown["allowed_file_upload_methods"] = list(item.allowed_file_upload_methods)
        if kind == "file-list":
            shown["number_limits"] = item.number_limits
    return shown


def open_form(data: Data, variables: VariableReader, *, node_id: str, now: float) -> OpenedForm:
    """The form this node execution waits on (nothing kept or sent yet)."""
    content = render_text(data.form_content, variables)
    inputs = [_shown_input(item, variables) for item in data.inputs]
    defaults = {
        item.output_variable_name: _resolved_default(item, variables)
        for item in data.inputs
        if item.type in ("paragraph", "text-input")
    }
    definition = {
        "form_id": str(uuid.uuid4()),
        "form_token": new_token(),
        "node_id": node_id,
        "node_title": data.title,
        "form_content": content,
        "inputs": inputs,
        "actions": [a.model_dump() for a in data.user_actions],
        "resolved_default_values": defaults,
        "display_in_ui": data.webapp,
        "webapp": data.webapp,
        "created_at": int(now),
        "expiration_time": int(now + data.timeout_s),
    }
    return OpenedForm(definition)


def record_of(opened: OpenedForm, variables: VariableReader) -> FormRecord:
    """The store's row for an opened form (the run's ids from `sys.*`)."""
    definition = opened.definition
    return FormRecord(
        id=definition["form_id"],
        token=definition["form_token"],
        app_id=as_text(variables.get(("sys", "app_id")) or ""),
        workflow_run_id=as_text(variables.get(("sys", "workflow_run_id")) or ""),
        node_id=definition["node_id"],
        user_id=as_text(variables.get(("sys", "user_id")) or ""),
        definition=definition,
        expires_at=float(definition["expiration_time"]),
        created_at=float(definition["created_at"]),
    )


# ---- events


def required_data(definition: Mapping[str, Any]) -> dict[str, Any]:
    """`human_input_required`'s data (no token when the form goes only by email)."""
    return {
        "form_id": definition["form_id"],
        "node_id": definition["node_id"],
        "node_title": definition["node_title"],
        "form_content": definition["form_content"],
        "inputs": definition["inputs"],
        "actions": definition["actions"],
        "display_in_ui": definition["display_in_ui"],
        "form_token": definition["form_token"] if definition.get("webapp") else None,
        "resolved_default_values": definition["resolved_default_values"],
        "expiration_time": definition["expiration_time"],
    }


def required_notice(definition: Mapping[str, Any]) -> NodeNotice:
    return NodeNotice("human_input_required", required_data(definition))


def pause_reason(definition: Mapping[str, Any]) -> dict[str, Any]:
    """The node's entry in `workflow_paused`'s `reasons`."""
    return {
        "type": "human_input_required",
        "form_id": definition["form_id"],
        "node_id": definition["node_id"],
        "node_title": definition["node_title"],
    }


def filled_data(
    definition: Mapping[str, Any], action_id: str, values: Mapping[str, Any]
) -> dict[str, Any]:
    """`human_input_form_filled`'s data."""
    return {
        "node_id": definition["node_id"],
        "node_title": definition["node_title"],
        "rendered_content": rendered_content(definition, values),
        "action_id": action_id,
        "action_text": _action(definition, action_id)["title"],
        "submitted_data": shown_values(values),
    }


def timeout_data(definition: Mapping[str, Any]) -> dict[str, Any]:
    """`human_input_form_timeout`'s data."""
    return {
        "node_id": definition["node_id"],
        "node_title": definition["node_title"],
        "expiration_time": definition["expiration_time"],
    }


# ---- answers


def _action(definition: Mapping[str, Any], action_id: str) -> Mapping[str, Any]:
    for action in definition["actions"]:
        if action["id"] == action_id:
            return action
    raise FormInvalid("errors.humanInput.invalidAction", action=str(action_id)[:50])


def _shown_value(value: Any) -> str:
    if isinstance(value, list):
        return f"[{len(value)} files]"
    if isinstance(value, Mapping) or hasattr(value, "to_dict"):
        return "[file]"
    return "" if value is None else str(value)


def rendered_content(definition: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    """The content with each input's place filled (files as `[file]`, `[N files]`)."""
    return OUTPUT_PLACE.sub(
        lambda m: _shown_value(values.get(m.group(1))), str(definition["form_content"])
    )


FileResolver = Callable[[Any, Mapping[str, Any]], Any]


def check_submission(
    definition: Mapping[str, Any],
    action_id: Any,
    inputs: Any,
    resolve_file: FileResolver | None = None,
) -> dict[str, Any]:
    """The accepted values (by input name), or FormInvalid. `resolve_file(value,
    input)` turns a submitted file mapping into a file (and checks it against
    the input's rules); without it files are refused."""
    if not isinstance(action_id, str):
        raise FormInvalid("errors.humanInput.invalidAction", action=str(action_id)[:50])
    _action(definition, action_id)
    given = inputs if isinstance(inputs, Mapping) else {}
    values: dict[str, Any] = {}
    missing: list[str] = []
    for item in definition["inputs"]:
        name = item["output_variable_name"]
        value = given.get(name)
        kind = item["type"]
        if kind == "paragraph":
            values[name] = _paragraph(name, value, definition)
        elif value is None or value == "" or value == []:
            missing.append(name)
        elif kind == "select":
            values[name] = _option(name, value, item)
        else:
            values[name] = _files(name, value, item, resolve_file)
    if missing:
        raise FormInvalid("errors.humanInput.missingInputs", names=", ".join(missing))
    return values


def _paragraph(name: str, value: Any, definition: Mapping[str, Any]) -> str:
    if value is None:
        return str(definition["resolved_default_values"].get(name, ""))
    if not isinstance(value, str):
        raise FormInvalid("errors.humanInput.notText", name=name)
    if len(value) > MAX_PARAGRAPH_CHARS:
        raise FormInvalid("errors.humanInput.tooLong", name=name, max=MAX_PARAGRAPH_CHARS)
    return value


def _option(name: str, value: Any, item: Mapping[str, Any]) -> str:
    options = item["option_source"]["value"]
    if not isinstance(value, str) or value not in options:
        raise FormInvalid("errors.humanInput.notAnOption", name=name)
    return value


def _files(
    name: str, value: Any, item: Mapping[str, Any], resolve_file: FileResolver | None
) -> Any:
    many = item["type"] == "file-list"
    entries = value if many else [value]
    # A mapping (Dify's file object) or, on the command line, an `@path` reference.
    if not isinstance(entries, list) or not all(isinstance(e, Mapping | str) for e in entries):
        raise FormInvalid("errors.humanInput.notFiles", name=name)
    if many and len(entries) > int(item.get("number_limits", 5)):
        raise FormInvalid(
            "errors.humanInput.tooManyFiles", name=name, max=int(item.get("number_limits", 5))
        )
    if resolve_file is None:
        raise FormInvalid("errors.humanInput.notFiles", name=name)
    files = [resolve_file(entry, item) for entry in entries]
    return files if many else files[0]


def _stored(value: Any) -> Any:
    if isinstance(value, list):
        return [_stored(v) for v in value]
    if isinstance(value, File):
        # The store is the server's own: a local file keeps its path there (never
        # in a reply or an event) so that the resumed run reads the same file.
        kept = value.to_dict()
        if value.path is not None:
            kept["path"] = str(value.path)
        return kept
    return value


def stored_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The accepted values as plain JSON for the store (files serialized)."""
    return {name: _stored(value) for name, value in values.items()}


def file_back(value: Any) -> Any:
    """A stored value as the run reads it (a serialized file a File again)."""
    if isinstance(value, list):
        return [file_back(v) for v in value]
    if is_file_mapping(value):
        return from_mapping(value)
    return value


def shown_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The values as an event shows them (files as Dify's file objects, no path)."""

    def show(value: Any) -> Any:
        if isinstance(value, list):
            return [show(v) for v in value]
        return value.to_dict() if isinstance(value, File) else value

    return {name: show(value) for name, value in values.items()}


def answer_outputs(
    definition: Mapping[str, Any], action_id: str, values: Mapping[str, Any]
) -> tuple[dict[str, Any], str]:
    """The node's outputs and the handle it takes, for an accepted answer."""
    outputs = dict(values)
    outputs[ACTION_ID] = action_id
    outputs[ACTION_VALUE] = _action(definition, action_id)["title"]
    outputs[RENDERED_CONTENT] = rendered_content(definition, values)
    return outputs, action_id


def timeout_outputs(definition: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The node's outputs when nobody answered in time: the paragraphs' defaults,
    empty selects and files; the `__timeout` handle."""
    outputs: dict[str, Any] = {}
    for item in definition["inputs"]:
        name = item["output_variable_name"]
        kind = item["type"]
        if kind == "paragraph":
            outputs[name] = definition["resolved_default_values"].get(name, "")
        elif kind == "file-list":
            outputs[name] = []
        elif kind == "file":
            outputs[name] = None
        else:
            outputs[name] = ""
    outputs[ACTION_ID] = TIMEOUT_HANDLE
    outputs[ACTION_VALUE] = ""
    outputs[RENDERED_CONTENT] = rendered_content(definition, outputs)
    return outputs, TIMEOUT_HANDLE
