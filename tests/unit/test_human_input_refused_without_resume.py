"""Where runs cannot resume a form (a `Runs` whose `resumes_forms` is False;
serve in-process and `--broker` both can), a submit is refused with 501
before anything changes: the form stays open and its run paused, to be
answered where runs can resume."""

from __future__ import annotations

import time
from pathlib import Path

from firstgate.nodes.human_input import Data
from firstgate.nodes.human_input import form as forms
from firstgate.serve.api import ServeContext, ServiceApi
from firstgate.serve.apps import load_directory
from firstgate.serve.runs import Runs
from firstgate.store import open_store
from firstgate.store.base import FORM_WAITING
from werkzeug.test import Client

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "human_input_workflow.yml"
KEY = "review-key-0123456789"


class NoResume(Runs):
    """A `Runs` with the base class's answer to `resume_form` (runs elsewhere)."""

    accepting = True

    def start(self, app, request):  # type: ignore[no-untyped-def]
        raise AssertionError("no run starts here")

    def get(self, task_id):  # type: ignore[no-untyped-def]
        return None

    def by_run_id(self, workflow_run_id):  # type: ignore[no-untyped-def]
        return None

    def stop(self, task_id, *, app, user, reason):  # type: ignore[no-untyped-def]
        return False

    @property
    def active(self) -> int:
        return 0

    def drain(self, grace, reason, settle=10.0):  # type: ignore[no-untyped-def]
        self.accepting = False

    def close(self) -> None:
        pass


class Pool:
    """The run's variables the form reads: its ids, and a draft for every other."""

    def __init__(self, app_id: str) -> None:
        self.values = {("sys", "app_id"): app_id, ("sys", "workflow_run_id"): "run-1"}

    def get(self, selector: tuple[str, ...]) -> object:
        return self.values.get(tuple(selector), "a draft")


def test_a_submit_where_runs_cannot_resume_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    apps_dir = tmp_path / "apps"
    apps_dir.mkdir()
    (apps_dir / "review.yml").write_text(CORPUS.read_text())
    apps = load_directory(apps_dir, {"FIRSTGATE_APP_KEY_REVIEW": KEY})
    app = apps.apps["review"]
    pool = Pool(app.workflow.app_id)
    node = next(n for n in app.workflow.graph.all_nodes.values() if isinstance(n.data, Data))
    opened = forms.open_form(node.data, pool, node_id=node.id, now=time.time())
    store = open_store(str(tmp_path / "state.db"))
    try:
        store.add_form(forms.record_of(opened, pool))
        context = ServeContext(
            apps=apps, store=store, runs=NoResume(), uploads_dir=tmp_path, settings=None
        )
        client = Client(ServiceApi(context))
        headers = {"Authorization": f"Bearer {KEY}"}
        body = {"inputs": {"priority": "low"}, "action": "approve", "user": "ann"}
        reply = client.post(f"/v1/form/human_input/{opened.token}", json=body, headers=headers)
        assert reply.status_code == 501 and reply.json["code"] == "not_implemented"
        kept = store.form(opened.token)
        assert kept is not None and kept.status == FORM_WAITING and kept.action_id is None
        # The form is still served.
        shown = client.get(f"/v1/form/human_input/{opened.token}", headers=headers)
        assert shown.status_code == 200
    finally:
        store.close()
