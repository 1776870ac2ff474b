"""The settings file's sections, each found by its own model class.

A section's model lives beside the code that reads it (connectors, sandbox,
a node); `runtime.settings` only assembles them into the file's model. A
layer below the runtime cannot name that whole model, so what it is handed
is this lookup: `sections.get(ToolsSettings)` is the file's `tools` section,
typed, or the model's defaults where the file has none (a default is
written once, in the model).
"""

from __future__ import annotations

from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationInfo

Section = TypeVar("Section", bound=BaseModel)


class Sections:
    """The sections of one loaded settings file (or none: every default)."""

    __slots__ = ("_by_model", "_known", "loaded")

    def __init__(self, settings: BaseModel | None = None) -> None:
        # Whether a settings file was given at all (some checks only apply then).
        self.loaded = settings is not None
        self._by_model: dict[type[BaseModel], BaseModel] = {}
        # Every section model the file has a field for, given or not (an
        # optional section, `x: XSettings | None = None`, may be absent).
        self._known: set[type[BaseModel]] = set()
        if settings is None:
            return
        values = dict(settings)
        for name, info in type(settings).model_fields.items():
            for kind in _models_in(info.annotation):
                if kind in self._known:
                    raise TypeError(
                        f"two settings sections share the model {kind.__name__} ({name})"
                    )
                self._known.add(kind)
            if isinstance(values[name], BaseModel):
                self._by_model[type(values[name])] = values[name]

    def find(self, model: type[Section]) -> Section | None:
        """The file's section read by `model`; None when the file has none.

        A model that is no section of a loaded file is a bug (a section the
        settings package does not assemble), raised rather than defaulted."""
        if self.loaded and model not in self._known:
            raise LookupError(f"{model.__name__} is not a section of the settings file")
        found = self._by_model.get(model)
        assert found is None or isinstance(found, model)
        return found

    def get(self, model: type[Section]) -> Section:
        """The section read by `model`: the file's, else the model's defaults
        (a section with required keys and no defaults is read with `find`)."""
        found = self.find(model)
        if found is None:
            found = self._by_model.setdefault(model, model())
            assert isinstance(found, model)
        return found


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's type names directly (`X`, `X | None`)."""
    if isinstance(annotation, type):
        return [annotation] if issubclass(annotation, BaseModel) else []
    if get_origin(annotation) not in (Union, UnionType):
        return []  # `dict[str, Route]`: entries of a section, not a section
    return [
        arg for arg in get_args(annotation) if isinstance(arg, type) and issubclass(arg, BaseModel)
    ]


# Where node models find the sections while a workflow file loads (pydantic's
# validation context): what a tool node may run is checked against them.
_CONTEXT_KEY = "sections"


def validation_context(sections: Sections) -> dict[str, Any]:
    return {_CONTEXT_KEY: sections}


def context_sections(info: ValidationInfo) -> Sections:
    """The sections a workflow file is loaded with (none given: no file)."""
    found = (info.context or {}).get(_CONTEXT_KEY)
    return found if isinstance(found, Sections) else Sections()
