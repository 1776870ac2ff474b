"""The second integration run really runs under gevent (not silently in plain threads)."""

from __future__ import annotations

import os
import threading

import pytest


@pytest.mark.skipif(os.environ.get("FIRSTGATE_GEVENT") != "1", reason="gevent mode only")
def test_gevent_mode_is_really_patched() -> None:
    from gevent import monkey

    assert monkey.is_module_patched("socket")
    assert monkey.is_module_patched("threading")
    assert "gevent" in type(threading.Lock()).__module__ or "gevent" in repr(threading.Lock)
