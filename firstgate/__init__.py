"""firstgate: Dify's workflows and chatflows, with model calls that stay honest
on slow, local and flaky model servers.

The one import package. Its subpackages are the repository's top-level
folders (`firstgate.runtime` is `runtime/`, and so on: see setup.py). The
names most programs need are here, loaded on first use so that importing a
low floor (`firstgate.locales`) never pulls in the runtime.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it
_EXPORTS = {
    "load_workflow": "firstgate.runtime",
    "load_settings": "firstgate.runtime",
    "RunLimits": "firstgate.runtime",
    "RunOptions": "firstgate.runtime",
    "RunResources": "firstgate.runtime",
    "open_store": "firstgate.store",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'firstgate' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
