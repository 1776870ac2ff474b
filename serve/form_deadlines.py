"""Forms past their deadline take their node's timeout branch, even when no
process was running at the deadline: serve looks when it starts and then
every `interval` seconds (`--form-sweep-interval`).

Each due form is closed by its timeout in the store (exactly once across
processes: `Store.close_form`), and the process that closed it resumes the
run (`Runs.resume_form`): `human_input_form_timeout`, the node's
`node_finished` with the `__timeout` handle, then the rest of the run.
"""

from __future__ import annotations

import logging
import threading

from firstgate.runtime import human_input
from firstgate.serve.apps import AppDirectory
from firstgate.serve.runs import Runs
from firstgate.store.base import Store

log = logging.getLogger("firstgate.serve")

DEFAULT_INTERVAL_S = 15.0


def sweep(store: Store, runs: Runs, apps: AppDirectory) -> int:
    """Close the forms that are due and resume their runs; how many were resumed."""
    by_app = {app.workflow.app_id: app for app in apps.apps.values()}
    resumed = 0
    for form in human_input.close_due(store):
        app = by_app.get(form.app_id)
        if app is None:
            log.warning("form %s timed out, and its app is not served here", form.id)
            continue
        try:
            runs.resume_form(app, form)
            resumed += 1
        except Exception:  # noqa: BLE001 - one run's failure must not stop the sweep
            log.exception("the run of form %s could not resume after its timeout", form.id)
    return resumed


class FormDeadlines:
    """The periodic sweep (a thread; a greenlet under gevent); `stop()` ends it."""

    def __init__(
        self, store: Store, runs: Runs, apps: AppDirectory, interval: float = DEFAULT_INTERVAL_S
    ) -> None:
        self.store, self.runs, self.apps = store, runs, apps
        self.interval = max(0.05, interval)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        sweep(self.store, self.runs, self.apps)  # start-up: what fell due while nothing ran
        self._thread = threading.Thread(target=self._loop, name="form-deadlines", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                sweep(self.store, self.runs, self.apps)
            except Exception:  # noqa: BLE001 - a store hiccup: try again next time
                log.exception("the form deadline sweep failed")

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5.0)
