"""Child processes that must feel a Ctrl-C."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """`preexec_fn` restoring the default Ctrl-C: a job that a non-interactive
    shell starts in the background (as CI may run us) inherits SIGINT *ignored*,
    and a Python started that way never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
