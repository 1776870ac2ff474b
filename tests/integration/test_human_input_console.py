"""The run console's human-input form (`serve/console/human_input_form.js`) in
headless Chromium against a real `firstgate serve`: a paused run's
`human_input_required` event shows as a form (content, a pre-filled
paragraph, a select, file pickers, the actions as buttons); a rejected
answer says why and leaves the buttons on; an accepted one uploads the files,
submits, and the run goes on to its end. The screenshot is kept under
`FIRSTGATE_ARTIFACTS`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_console_browser import _shot, _wait, browser  # noqa: F401 - fixture
from tests.serve_support import Server, serve

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "human_input_workflow.yml"
KEY = "review-key-0123456789"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "review.yml").write_text(CORPUS.read_text())
    with serve(tmp_path, "http://127.0.0.1:9/v1", apps=apps, keys={"review": KEY}) as running:
        yield running


def _paused(server: Server) -> dict[str, Any]:
    body = {"inputs": {"topic": "tea"}, "response_mode": "streaming", "user": "ann"}
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.stream(
        "POST", server.url + "/v1/workflows/run", json=body, headers=headers, timeout=60
    ) as response:
        frames = [
            json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")
        ]
    return next(f for f in frames if f["event"] == "human_input_required")


def test_the_console_shows_the_form_and_submits_it(browser, server: Server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    event = _paused(server)
    token = event["data"]["form_token"]
    browser.get(server.url + "/")
    for field, value in (("key", KEY), ("user", "ann")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    browser.execute_script(
        "const s = document.createElement('script'); s.src = '/console/human_input_form.js';"
        "document.head.append(s);"
        "const c = document.createElement('div'); c.id = 'human-input'; document.body.prepend(c);"
    )
    _wait(browser, lambda d: d.execute_script("return !!window.firstgateHumanInput"), 60)
    browser.execute_script(
        "window.firstgateHumanInput.render(arguments[0], document.getElementById('human-input'),"
        " arguments[1])",
        event,
        f"/v1/form/human_input/{token}",
    )
    form = _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#human-input form.hi-form"))
    assert form.find_element(By.CSS_SELECTOR, ".hi-title").text == "Review"
    assert "A short note about tea." in form.find_element(By.CSS_SELECTOR, ".hi-content").text
    edits = form.find_element(By.CSS_SELECTOR, "[data-input=edits] textarea")
    assert edits.get_attribute("value") == "A short note about tea."
    buttons = form.find_elements(By.CSS_SELECTOR, "button.hi-action")
    assert [b.text for b in buttons] == ["Approve", "Use my edits", "Reject"]
    # Nothing chosen yet: the server refuses and says what is missing.
    buttons[0].click()
    status = form.find_element(By.CSS_SELECTOR, ".hi-status")
    # Generous waits: the machine these run on is shared (uploads, a submit, a resume).
    _wait(browser, lambda d: status.get_attribute("data-state") == "failed", 60)
    assert "priority" in status.text and buttons[0].is_enabled()

    edits.clear()
    edits.send_keys("edited in the browser")
    Select(form.find_element(By.CSS_SELECTOR, "[data-input=priority] select")).select_by_value(
        "medium"
    )
    note = tmp_path / "note.md"
    note.write_text("# a note\n")
    for name in ("attachment", "references"):
        form.find_element(By.CSS_SELECTOR, f"[data-input={name}] input").send_keys(str(note))
    buttons[1].click()
    _wait(browser, lambda d: status.get_attribute("data-state") == "sent", 60)
    assert status.text == "Sent: Use my edits"
    _shot(browser, "human-input-form")
    run_id = event["workflow_run_id"]
    headers = {"Authorization": f"Bearer {KEY}"}
    give_up = time.monotonic() + 60
    record: dict[str, Any] = {}
    while time.monotonic() < give_up:
        record = httpx.get(f"{server.url}/v1/workflows/run/{run_id}", headers=headers).json()
        if record["status"] == "succeeded":
            break
        time.sleep(0.1)
    assert record["status"] == "succeeded"
    assert record["outputs"] == {"text": "edited in the browser", "action": "Use my edits"}
