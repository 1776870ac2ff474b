"""The apps `firstgate serve` offers: one per export in a directory, each with
the API key its environment variable gives it.

An app's key comes from `FIRSTGATE_APP_KEY_<STEM>` (the file's stem upper-cased,
every other character `_`), never from the export; its app id from its mode,
name and stem. An export without a key, one that does not load, or one whose
key or app id another app already has, is not served; each is reported by
name at start-up and the other apps are served anyway.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firstgate.common.sections import Sections
from firstgate.locales.localized_error import LocalizedError
from firstgate.runtime.dsl.app_modes import compile_document
from firstgate.runtime.loader import read_document
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.workflow import Workflow, load_workflow

KEY_PREFIX = "FIRSTGATE_APP_KEY_"
EXPORT_SUFFIXES = (".yml", ".yaml")
# A key shorter than this is refused: it could be guessed.
MIN_KEY_CHARS = 8


def key_variable(stem: str) -> str:
    """`FIRSTGATE_APP_KEY_<STEM>`: the stem upper-cased, other characters as `_`."""
    return KEY_PREFIX + re.sub(r"[^A-Z0-9]", "_", stem.upper())


@dataclass(frozen=True, slots=True)
class App:
    stem: str
    path: Path
    key: str = field(repr=False)
    workflow: Workflow
    name: str
    description: str
    # The export's `workflow.features` and the start node's variables, as written:
    # `/parameters` reports them as Dify does (its user_input_form is the raw list).
    features: Mapping[str, Any]
    start_variables: list[dict[str, Any]]

    @property
    def mode(self) -> str:
        return self.workflow.app_mode

    @property
    def chat(self) -> bool:
        return self.workflow.chat

    @property
    def completion(self) -> bool:
        """A text generator (`completion`): served on /completion-messages only."""
        return self.workflow.app_mode == "completion"


@dataclass(frozen=True, slots=True)
class Skipped:
    """An export that is not served, and why (a message key and its params)."""

    path: Path
    message_key: str
    params: Mapping[str, Any]


@dataclass(slots=True)
class AppDirectory:
    apps: dict[str, App] = field(default_factory=dict)  # by stem
    skipped: list[Skipped] = field(default_factory=list)

    def by_key(self, key: str) -> App | None:
        """The app whose key this is; every key is compared in constant time."""
        found = None
        for app in self.apps.values():
            if hmac.compare_digest(app.key.encode(), key.encode()):
                found = app
        return found


def _start_variables(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    nodes = raw.get("workflow", {}).get("graph", {}).get("nodes", [])
    for node in nodes:
        data = node.get("data") if isinstance(node, Mapping) else None
        if isinstance(data, Mapping) and data.get("type") == "start":
            return [dict(v) for v in data.get("variables") or [] if isinstance(v, Mapping)]
    return []


def load_app(path: Path, key: str, settings: RuntimeSettings | None = None) -> App:
    """One export as an app; raises DslError (every problem) when it does not load.
    `settings` define the api and workflow tools its tool and agent nodes use."""
    raw = read_document(path)
    workflow = load_workflow(raw, settings=settings, stem=path.stem)
    raw, _ = compile_document(raw, Sections(settings))  # an easy-mode app's features and form
    app_section = raw.get("app", {})
    features = raw.get("workflow", {}).get("features") or {}
    return App(
        stem=path.stem,
        path=path,
        key=key,
        workflow=workflow,
        name=str(app_section.get("name") or path.stem),
        description=str(app_section.get("description") or ""),
        features=dict(features) if isinstance(features, Mapping) else {},
        start_variables=_start_variables(raw),
    )


def load_directory(
    directory: Path, environ: Mapping[str, str], settings: RuntimeSettings | None = None
) -> AppDirectory:
    found = AppDirectory()
    exports = sorted(p for p in directory.iterdir() if p.suffix in EXPORT_SUFFIXES and p.is_file())
    owners: dict[str, Path] = {}
    ids: dict[str, Path] = {}
    for path in exports:
        variable = key_variable(path.stem)
        key = environ.get(variable, "").strip()
        if not key:
            found.skipped.append(Skipped(path, "serve.app.noKey", {"variable": variable}))
            continue
        if len(key) < MIN_KEY_CHARS:
            found.skipped.append(
                Skipped(path, "serve.app.shortKey", {"variable": variable, "min": MIN_KEY_CHARS})
            )
            continue
        if key in owners or path.stem in found.apps:
            found.skipped.append(
                Skipped(
                    path,
                    "serve.app.keyTaken",
                    {"variable": variable, "other": owners.get(key, path).name},
                )
            )
            continue
        try:
            app = load_app(path, key, settings)
        except LocalizedError as exc:
            found.skipped.append(Skipped(path, "serve.app.notLoaded", {"error": exc.render()}))
            continue
        # Every check of who may read a conversation, run or upload compares app
        # ids: two apps with one id would read each other's data.
        other = ids.get(app.workflow.app_id)
        if other is not None:
            found.skipped.append(Skipped(path, "serve.app.idTaken", {"other": other.name}))
            continue
        owners[key] = path
        ids[app.workflow.app_id] = path
        found.apps[path.stem] = app
    return found
