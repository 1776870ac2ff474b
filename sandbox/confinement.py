"""What a sandbox worker may see: its environment and its file-system allow-list.

Computed in the runtime, handed to the worker in its first frame, enforced by
the worker with Landlock (see `sandbox/worker/landlock.py`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

# The whole environment of a worker and its jobs: nothing of the runtime's.
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}

# Read-only: the system's programs and libraries, nothing of /etc but what a
# runtime reads at start, and no /proc (so no other process's environment).
SYSTEM_READ_ONLY = (
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
    "/bin",
    "/etc/localtime",
    "/etc/ld.so.cache",
    "/etc/ssl/openssl.cnf",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
)
WRITABLE_DEVICES = ("/dev/null",)


@dataclass(frozen=True, slots=True)
class Interpreters:
    python: str
    node: str | None
    read_only: tuple[str, ...] = field(default=())


def find_interpreters(python: str | None, node: str | None) -> Interpreters:
    """The worker's Python (default: this one), Node.js (default: on PATH, may be
    missing) and the directories they load their own files from."""
    python = python or sys.executable
    # A configured path that is not an executable means "no Node.js" (named in
    # the error a JavaScript node gets), never a silent fallback to another one.
    node = shutil.which("node") if node is None else node
    if node and not os.access(node, os.X_OK):
        node = None
    paths = set(_python_prefixes(python))
    if node:
        real = os.path.realpath(node)
        paths.add(os.path.dirname(os.path.dirname(real)))  # <prefix>/bin/node -> <prefix>
    return Interpreters(python, node, tuple(sorted(p for p in paths if p not in ("", "/"))))


def _python_prefixes(python: str) -> list[str]:
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        import site

        found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
        return found + list(site.getsitepackages())
    script = (
        "import json, site, sys; print(json.dumps([sys.prefix, sys.base_prefix, "
        "sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages()]))"
    )
    out = subprocess.run(
        [python, "-I", "-c", script], capture_output=True, text=True, timeout=30, check=True
    )
    return [str(p) for p in json.loads(out.stdout)]


def read_only_paths(interpreters: Interpreters) -> list[str]:
    return sorted({*SYSTEM_READ_ONLY, *interpreters.read_only})
