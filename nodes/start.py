"""Start node: declares the workflow's inputs and checks what the caller passed."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

from firstgate.common import files
from firstgate.common.dsl import DslModel, dsl_error, shown
from firstgate.common.files import File, FileError, FileRules
from firstgate.common.nesting import MAX_DEPTH, deeper_than
from firstgate.locales import t
from firstgate.nodes.base import NodeContext, NodeResult, NodeRunError, Role
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.selectors import Selector
from firstgate.nodes.spec import NodeSpec
from pydantic import Field, field_validator

InputType = Literal[
    "text-input", "paragraph", "select", "number", "checkbox", "json_object", "file", "file-list"
]
FILE_TYPES = ("file", "file-list")
TEXT_TYPES = ("text-input", "paragraph", "select")


class InputVariable(DslModel):
    variable: str = Field(min_length=1)
    label: str = ""
    type: InputType = "text-input"
    required: bool = False
    max_length: int | None = None
    options: list[str] = Field(default_factory=list)
    default: Any = None
    # File inputs: which types, extensions (for `custom`) and upload methods they take.
    allowed_file_types: list[str] = Field(default_factory=list)
    allowed_file_extensions: list[str] = Field(default_factory=list)
    allowed_file_upload_methods: list[str] = Field(default_factory=list)

    def file_rules(self, upload_config: Mapping[str, Any] | None) -> FileRules:
        return FileRules.from_config(
            self.allowed_file_types,
            self.allowed_file_extensions,
            self.allowed_file_upload_methods,
            upload_config,
        )


class Data(BaseNodeData):
    variables: list[InputVariable] = Field(default_factory=list)

    @field_validator("variables")
    @classmethod
    def _unique(cls, variables: list[InputVariable]) -> list[InputVariable]:
        seen: set[str] = set()
        for variable in variables:
            if variable.variable in seen:  # the second would silently replace the first
                raise dsl_error(
                    "dsl.start.duplicateVariable",
                    "declares the input {name} more than once",
                    name=shown(variable.variable),
                )
            seen.add(variable.variable)
        return variables


class InputError(NodeRunError):
    """The caller's inputs do not fit the start node's declaration (CLI exit 2)."""


class FileInputError(InputError):
    """A file input is missing, unreadable or not accepted: names the input and
    says why in the same language."""

    message_key = "dsl.input.file"

    def __init__(self, name: str, cause: FileError) -> None:
        self.cause = cause
        super().__init__(name=name, error=cause.render())

    def render(self, locale: str | None = None) -> str:
        return t(self.message_key, locale, **{**self.params, "error": self.cause.render(locale)})


def as_file(value: Any) -> File:
    """A file from what a caller may pass: a File, `@path`, a path, an http(s)
    URL, or Dify's `{transfer_method: remote_url, url}` object."""
    if isinstance(value, File):
        return value
    if isinstance(value, Mapping):
        return files.from_mapping(value)
    if isinstance(value, str) and value.strip():
        return files.from_reference(value.strip())
    raise FileError("errors.file.badObject")


def coerce_files(
    name: str, raw: Any, rules: FileRules, *, many: bool, limit: int | None = None
) -> File | list[File]:
    """One file (or a list, for `file-list` and `sys.files`) checked against the rules."""
    items = list(raw) if isinstance(raw, list | tuple) else [raw]
    if not many and len(items) != 1:
        raise InputError("dsl.input.oneFile", name=name, count=len(items))
    if many and limit and len(items) > limit:
        raise InputError("dsl.input.tooManyFiles", name=name, count=len(items), max=limit)
    found: list[File] = []
    for item in items:
        try:
            file = as_file(item)
            rules.check(file)
        except FileError as exc:
            raise FileInputError(name, exc) from None
        found.append(file)
    return found if many else found[0]


def selectors(data: Data) -> list[Selector]:
    return []


def output_names(data: Data) -> set[str]:
    return {v.variable for v in data.variables}


def _coerce(spec: InputVariable, raw: Any, upload_config: Mapping[str, Any] | None) -> Any:
    def bad(expected: str) -> InputError:
        return InputError(
            "dsl.input.type",
            name=spec.variable,
            expected=expected,
            got=shown(raw),
        )

    if spec.type in FILE_TYPES:
        many = spec.type == "file-list"
        return coerce_files(
            spec.variable,
            raw,
            spec.file_rules(upload_config),
            many=many,
            limit=spec.max_length if many else None,
        )
    if spec.type == "number":
        return _number(spec, raw, bad)
    if spec.type == "checkbox":
        if isinstance(raw, bool):
            return raw
        lowered = str(raw).strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off", ""):
            return False
        raise bad("true or false")
    if spec.type == "json_object":
        value = _json(spec, raw, bad) if isinstance(raw, str) else raw
        if not isinstance(value, dict):
            raise bad("a JSON object")
        if deeper_than(value):
            raise InputError("dsl.input.tooDeep", name=spec.variable, limit=MAX_DEPTH)
        return value
    if not isinstance(raw, str):  # Dify: an object, a number, NaN are no text
        raise InputError("dsl.input.notString", name=spec.variable, got=shown(raw))
    text = raw
    if spec.type == "select" and spec.options and text not in spec.options:
        raise bad("one of " + ", ".join(spec.options))
    if spec.max_length and len(text) > spec.max_length:
        raise InputError(
            "dsl.input.tooLong",
            name=spec.variable,
            max=spec.max_length,
        )
    return text


def _number(spec: InputVariable, raw: Any, bad: Callable[[str], InputError]) -> int | float:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, float):
        number = raw
    else:
        try:
            number = float(str(raw))
        except ValueError:
            raise bad("a number") from None
    if not math.isfinite(number):  # 1e999, inf, nan: not numbers a workflow can use (or print)
        raise InputError("dsl.input.notFinite", name=spec.variable, got=shown(raw))
    if isinstance(raw, float):
        return raw
    return int(number) if number.is_integer() and "." not in str(raw) else number


def _refuse_constant(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are not JSON


def _json(spec: InputVariable, raw: str, bad: Callable[[str], InputError]) -> Any:
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except ValueError:
        raise bad("a JSON object") from None
    except RecursionError:  # thousands of levels: the parser gives up before we can count
        raise InputError("dsl.input.tooDeep", name=spec.variable, limit=MAX_DEPTH) from None


def validate_inputs(
    data: Data, inputs: Mapping[str, Any], upload_config: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Coerce the caller's inputs; missing optional ones take their default (or None).

    `upload_config` is the app's `features.file_upload.fileUploadConfig` (size limits).
    """
    declared = {v.variable for v in data.variables}
    unknown = sorted(set(inputs) - declared)
    if unknown:
        raise InputError(
            "dsl.input.unknown",
            name=unknown[0],
            declared=", ".join(sorted(declared)) or "(none)",
        )
    values: dict[str, Any] = {}
    for spec in data.variables:
        raw = inputs.get(spec.variable)
        if raw is None or raw == "" or raw == []:
            if spec.default not in (None, ""):
                raw = spec.default
                if spec.type in TEXT_TYPES and not isinstance(raw, str):
                    raw = str(raw)  # the export's own `default: 5` stays text
            elif spec.required:
                raise InputError(
                    "dsl.input.missing",
                    name=spec.variable,
                )
            else:
                values[spec.variable] = None
                continue
        values[spec.variable] = _coerce(spec, raw, upload_config)
    return values


def run(data: Data, ctx: NodeContext) -> NodeResult:
    # The engine validated the inputs before the run began.
    return NodeResult(outputs=dict(ctx.inputs), inputs=dict(ctx.inputs))


SPEC = NodeSpec(
    type="start",
    role=Role.ROOT,
    data_model=Data,
    run=run,
    selectors=selectors,
    output_names=output_names,
    supports_retry=False,
    inline=True,
    accepts=validate_inputs,
)
