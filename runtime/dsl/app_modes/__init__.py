"""Dify's easy app modes (`chat`, `agent-chat`, `completion`): an export with a
`model_config` instead of a graph, compiled into the graph Dify's editor would
draw for it (`compile`), so the engine, the gate, the store and the events see
an ordinary chatflow or workflow."""

from firstgate.runtime.dsl.app_modes.compile import (
    OUTPUT_PRESET_SELECTOR,
    EasyApp,
    compile_document,
    is_easy,
)
from firstgate.runtime.dsl.app_modes.model_config import EASY_MODES

__all__ = ["EASY_MODES", "OUTPUT_PRESET_SELECTOR", "EasyApp", "compile_document", "is_easy"]
