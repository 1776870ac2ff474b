"""A workflow's environment variables: declared in the DSL (`string`, `number`,
`secret`), given their values at run time.

Where a value comes from, first match wins: the process environment
(`FIRSTGATE_ENV_<NAME>`), then an env file (`--env-file`: `NAME=value` lines,
the name with or without the prefix), then the value in the DSL (exports leave
secrets empty). Secret values are handed to a `Redactor` so that no event,
log line or error shows them; a secret shorter than the redaction rule's
minimum is refused, since replacing it everywhere would mangle ordinary text.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firstgate.common.redaction import MIN_SECRET_CHARS
from firstgate.locales.localized_error import LocalizedError
from firstgate.runtime.execution.redaction import Redactor

ENV_PREFIX = "FIRSTGATE_ENV_"


class EnvVarError(LocalizedError):
    """An environment variable or env file cannot be used (exit 2). Never quotes a value."""


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    value_type: str  # string | number | secret
    value: Any = None


def read_env_file(path: str | Path) -> dict[str, str]:
    """`NAME=value` lines; `#` comments, blank lines, `export ` and quotes allowed."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        detail = getattr(exc, "strerror", None) or type(exc).__name__
        raise EnvVarError("errors.env.fileUnreadable", path=str(source), detail=detail) from None
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name:
            # The line itself may hold a secret: say where, never what.
            raise EnvVarError("errors.env.fileLine", path=str(source), line=number)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[name.removeprefix(ENV_PREFIX)] = value
    return values


def _number(name: str, raw: Any) -> int | float:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        number: float = raw
    else:
        try:
            number = float(str(raw).strip())
        except ValueError:
            raise EnvVarError("errors.env.number", name=name) from None
    if not math.isfinite(number):
        raise EnvVarError("errors.env.number", name=name)
    if isinstance(raw, int) or (number.is_integer() and "." not in str(raw)):
        return int(number)
    return number


def resolve(
    declared: Sequence[EnvVar],
    environ: Mapping[str, str] | None = None,
    file_values: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], Redactor]:
    """The values of the declared variables, and a redactor for the secret ones."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    secrets: list[str] = []
    for var in declared:
        raw: Any = var.value
        if f"{ENV_PREFIX}{var.name}" in environ:
            raw = environ[f"{ENV_PREFIX}{var.name}"]
        elif file_values is not None and var.name in file_values:
            raw = file_values[var.name]
        if var.value_type == "number":
            values[var.name] = None if raw in (None, "") else _number(var.name, raw)
            continue
        text = "" if raw is None else str(raw)
        if var.value_type == "secret" and text:
            if len(text) < MIN_SECRET_CHARS:
                raise EnvVarError("errors.env.shortSecret", name=var.name, min=MIN_SECRET_CHARS)
            secrets.append(text)
        values[var.name] = text
    return values, Redactor(secrets)
