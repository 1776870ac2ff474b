"""The settings file's sections, each found by its own model class.

A section's model lives beside the code that reads it (connectors, sandbox,
a node); `runtime.settings` only assembles them into the file's model. A
layer below the runtime cannot name that whole model, so what it is handed
is this lookup: `sections.get(ToolsSettings)` is the file's `tools` section,
typed, or the model's defaults where the file has none (a default is
written once, in the model).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationInfo

Section = TypeVar("Section", bound=BaseModel)


class Sections:
    """The sections of one loaded settings file (or none: every default)."""

    __slots__ = ("_by_model", "loaded")

    def __init__(self, settings: BaseModel | None = None) -> None:
        # Whether a settings file was given at all (some checks only apply then).
        self.loaded = settings is not None
        self._by_model: dict[type[BaseModel], BaseModel] = {}
        for name, value in settings or ():
            if not isinstance(value, BaseModel):
                continue  # the model-routing keys: a dict of routes, a name
            kind = type(value)
            if kind in self._by_model:
                raise TypeError(f"two settings sections share the model {kind.__name__} ({name})")
            self._by_model[kind] = value

    def get(self, model: type[Section]) -> Section:
        """The section read by `model`: the file's; without a file, the defaults.

        A model that is no section of a loaded file is a bug (a section the
        settings package does not assemble), raised rather than defaulted."""
        found = self._by_model.get(model)
        if found is None:
            if self.loaded:
                raise LookupError(f"{model.__name__} is not a section of the settings file")
            found = self._by_model.setdefault(model, model())
        assert isinstance(found, model)
        return found


# Where node models find the sections while a workflow file loads (pydantic's
# validation context): what a tool node may run is checked against them.
_CONTEXT_KEY = "sections"


def validation_context(sections: Sections) -> dict[str, Any]:
    return {_CONTEXT_KEY: sections}


def context_sections(info: ValidationInfo) -> Sections:
    """The sections a workflow file is loaded with (none given: no file)."""
    found = (info.context or {}).get(_CONTEXT_KEY)
    return found if isinstance(found, Sections) else Sections()
