"""The `files` section: where files that nodes produce are written.

    files:
      dir: ./run-files     # default: a private temporary folder per process

A tool's blob or image and a binary HTTP response become Dify file objects
(`tool_file`) whose bytes live here; the files outlive the run (their paths
are in the run's outputs), so the folder is the operator's to clean.
"""

from __future__ import annotations

from firstgate.common.dsl import DslModel


class FilesSettings(DslModel):
    dir: str | None = None
