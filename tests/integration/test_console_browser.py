"""The run console in a real browser: headless Chromium (Debian's chromium and
chromium-driver) driven through selenium's WebDriver client, against a real
`firstgate serve` process and a fake model process (one route up, one down).

The tests read what the page shows: the waterfall's rows (node names, types,
statuses, token counts, a retry said once, the error with what handled it,
rounds under their iteration), the run summary, the end outputs by name, a
node opened (its prompt with the secret as `***`), the required-input check,
the page cleared on an app change and on a failed request, the run history
filtered by status and an old run opened from the store, a chat app's
conversations, and the easy app modes (chat, completion). Screenshots are
kept under `FIRSTGATE_ARTIFACTS` (`.ci/run` prints where)."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from firstgate.connectors.local_index import LocalIndex

from tests.fakes import model_answers as ma
from tests.fakes import probe_server as ps
from tests.serve_support import APPS, Server, echo_model, serve

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(
    os.environ.get("FIRSTGATE_ARTIFACTS", Path(tempfile.gettempdir()) / "firstgate-artifacts")
)
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1600,1400",
)
KEYS = {
    "chat": "chat-key-0123456789",
    "story": "story-key-0123456789",
    "review": "review-key-0123456789",
    "easy_chat_advanced": "easy-chat-key-0123456789",
    "easy_completion": "write-key-0123456789",
    "easy_agent_chat": "agent-key-0123456789",
    "patient": "patient-key-0123456789",
    "nested": "nested-key-0123456789",
}
SECRET = "sk-console-secret-42"  # review.yml's secret environment variable
PLAN = json.dumps({"steps": ["a", "b"]})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("console")
    apps = tmp / "apps"
    apps.mkdir()
    for source in (
        APPS / "chat.yml",
        APPS / "story.yml",
        ROOT / "tests" / "console_apps" / "review.yml",
        ROOT / "tests" / "console_apps" / "patient.yml",
        ROOT / "tests" / "console_apps" / "nested.yml",
        ROOT / "tests" / "corpus" / "easy_chat_advanced.yml",
        ROOT / "tests" / "corpus" / "easy_completion.yml",
        ROOT / "tests" / "corpus" / "easy_agent_chat.yml",
    ):
        shutil.copy(source, apps / source.name)
    docs = tmp / "docs"
    docs.mkdir()
    (docs / "mugs.md").write_text("The blue mug holds 300 ml and survives the dishwasher.\n")
    index = LocalIndex(tmp / "kb.sqlite", create=True)
    index.update(docs)
    index.close()
    # The patient app's server: busy with the prompt (its slots say so) for 1.5 s.
    slow = ma.answer("considered at length", delay=1.5)
    with echo_model() as base_url, ps.ProbeServer(slots=ps.always_busy(), chat=slow) as busy:
        settings = tmp / "settings.yaml"
        settings.write_text(
            yaml.safe_dump(
                {
                    "providers": {
                        "local": {"kind": "openai-compatible", "base_url": base_url},
                        # Nothing listens on the discard port: the critic's route is down,
                        # the editor's falls back to the model that answers.
                        "dead": {"kind": "openai-compatible", "base_url": "http://127.0.0.1:9/v1"},
                        "busy": {
                            "kind": "openai-compatible",
                            "base_url": busy.base_url,
                            "probe": "llama.cpp-slots",
                            "first_token_timeout_s": 0.3,
                        },
                        "shaky": {
                            "kind": "openai-compatible",
                            "base_url": "http://127.0.0.1:9/v1",
                            "fallbacks": ["local"],
                        },
                    },
                    "default": "local",
                    "knowledge": {
                        "datasets": {"6f1c9a": {"kind": "local", "index": str(tmp / "kb.sqlite")}}
                    },
                }
            )
        )
        extra = ("--models", str(settings))
        with serve(tmp, base_url, apps=apps, keys=KEYS, extra=extra) as running:
            yield running


@pytest.fixture
def browser(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    assert chromium and driver_path, (
        "Debian's chromium and chromium-driver are needed (.ci/system-packages)"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    language = getattr(request, "param", "en-US")
    options.add_argument(f"--lang={language}")
    options.add_experimental_option("prefs", {"intl.accept_languages": language})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver, condition, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition)


def _shot(driver, name: str) -> Path:  # type: ignore[no-untyped-def]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"console-{name}.png"
    driver.save_screenshot(str(path))
    return path


def _open_app(driver, server: Server, stem: str) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    if not driver.current_url.startswith(server.url):
        driver.get(server.url + "/")
    _wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#app option")) == len(KEYS))
    Select(driver.find_element(By.ID, "app")).select_by_value(stem)
    key = driver.find_element(By.ID, "key")
    key.clear()
    key.send_keys(KEYS[stem])
    driver.execute_script("document.getElementById('key').dispatchEvent(new Event('change'))")


def _text(driver, css: str) -> str:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css).text


def _click(driver, css: str) -> None:  # type: ignore[no-untyped-def]
    """Click what `css` finds, again if the page re-drew it meanwhile (a list reloads)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def clicked(d) -> bool:  # type: ignore[no-untyped-def]
        try:
            d.find_element(By.CSS_SELECTOR, css).click()
        except StaleElementReferenceException:
            return False
        return True

    _wait(driver, clicked)


def _rows(driver) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    """Every node row of the waterfall, in page order, as the page shows it."""
    return driver.execute_script(
        """
        return [...document.querySelectorAll('#rows .node')].map((n) => ({
          id: n.dataset.id,
          name: n.querySelector(':scope > details > summary .name').textContent,
          type: n.querySelector(':scope > details > summary .type').textContent,
          status: n.querySelector(':scope > details > summary .status').textContent,
          metrics: n.querySelector(':scope > details > summary .metrics').innerText,
          time: n.querySelector(':scope > details > summary .time').textContent,
          notes: n.querySelector(':scope > .notes').innerText,
          marks: [...n.querySelectorAll(':scope > details > summary .mark')].map((m) => m.className),
          round: n.parentElement.classList.contains('round') ? n.parentElement.dataset.round : '',
        }));
        """
    )


def _summary(driver) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#summary dd')]"
        ".map((d) => [d.dataset.field, d.textContent]))"
    )


def _outputs(driver) -> dict[str, str]:  # type: ignore[no-untyped-def]
    # Pairs, not an object: WebDriver hands an object's keys back sorted.
    pairs = driver.execute_script(
        "return [...document.querySelectorAll('#outputs dt')]"
        ".map((t) => [t.textContent, t.nextElementSibling.textContent])"
    )
    return dict(pairs)


def _fill_review(driver, topic: str) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _wait(driver, lambda d: d.find_elements(By.NAME, "plan"))
    driver.find_element(By.NAME, "topic").send_keys(topic)
    driver.find_element(By.NAME, "plan").send_keys(PLAN)


def _history(driver) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    return driver.execute_script(
        "return [...document.querySelectorAll('#history li')].map((l) => "
        "({run: l.dataset.run || '', status: l.dataset.status || '', "
        "conversation: l.dataset.conversation || '', text: l.textContent}))"
    )


def test_a_run_shows_its_waterfall_summary_outputs_and_what_handled_each_error(
    browser, server: Server
) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "review")
    _fill_review(browser, "[flaky] paper boats")
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: _text(d, "#status") == "partial-succeeded")
    rows = _rows(browser)
    assert [r["name"] for r in rows] == [
        "Start", "Writer", "Editor", "Critic", "Apology", "Each step", "Shout", "Shout", "End",
    ]  # fmt: skip
    writer, editor, critic = rows[1], rows[2], rows[3]
    # The retry said once, what handled it, the model's tokens, rate and first token.
    assert writer["notes"].count("retry 1: The model provider is unavailable: HTTP 503") == 1
    assert "handled by retry" in writer["notes"] and writer["status"] == "succeeded"
    assert re.search(r"^10 tokens\n[\d.]+ tokens/s\nfirst token after [\d.]+ s$", writer["metrics"])
    assert "mark retry" in writer["marks"] and "mark first_token" in writer["marks"]
    # The editor's route is down, its fallback answered: the swap in its row.
    assert "fallback (swap): shaky failed (ConnectError); switching to local." in editor["notes"]
    assert "mark fallback" in editor["marks"] and editor["status"] == "succeeded"
    assert editor["metrics"].startswith("9 tokens\n")
    # The critic's route is down: its error in its row, and the fail branch took over.
    # Its two retries failed alike: said once, with both attempts.
    assert critic["status"] == "exception"
    refused = "Could not reach the model server at http://127.0.0.1:9/v1/chat/completions"
    assert critic["notes"].count(f"retry 1, 2: {refused}") == 1
    assert critic["notes"].count(refused) == 2  # the retries' line and the last error's
    assert critic["notes"].endswith("handled by fail branch")
    assert "handled by retry" not in critic["notes"]
    assert rows[4]["status"] == "succeeded"
    # The iteration's rounds under it, each with its Shout.
    assert [(r["name"], r["round"]) for r in rows[6:8]] == [("Shout", "0"), ("Shout", "1")]
    rounds = browser.find_elements(By.CSS_SELECTOR, "#rows .rounds .round > h4")
    assert [h.text for h in rounds] == ["round 1", "round 2"]
    assert all(r["time"].endswith(" s") for r in rows)
    summary = _summary(browser)
    assert re.fullmatch(r"[0-9a-f-]{36}", summary["runId"])
    assert summary["status"] == "partial-succeeded"
    assert summary["steps"] == "9" and summary["tokens"] == "19"
    assert summary["totalTime"].endswith(" s")
    outputs = _outputs(browser)
    assert list(outputs) == ["text", "tidy", "note", "steps"]  # by name, as the end declares
    assert outputs["text"] == "echo: [flaky] paper boats ***"  # the model echoed the secret
    assert outputs["note"] == "no review today"
    assert json.loads(outputs["steps"]) == ["A", "B"]
    # Opening a node: its prompt and process data, the secret as ***.
    writer_row = browser.find_element(By.CSS_SELECTOR, f'#rows .node[data-id="{writer["id"]}"]')
    writer_row.find_element(By.CSS_SELECTOR, "summary").click()
    details = writer_row.find_element(By.CSS_SELECTOR, ".more")
    _wait(browser, lambda d: details.is_displayed())
    headings = [h.text for h in details.find_elements(By.TAG_NAME, "h4")]
    assert headings == ["Prompt", "Outputs", "Process data"]  # an LLM node reads no inputs
    assert "[flaky] paper boats ***" in details.text and '"route": "local"' in details.text
    assert SECRET not in browser.page_source
    _shot(browser, "waterfall")

    # The same run opened again from the store: the same timeline, marks and all.
    run_id = summary["runId"]
    _wait(browser, lambda d: any(h["run"] == run_id for h in _history(d)))
    _open_app(browser, server, "story")  # another app, then back
    _open_app(browser, server, "review")
    _wait(browser, lambda d: any(h["run"] == run_id for h in _history(d)))
    _click(browser, f'#history li[data-run="{run_id}"]')
    _wait(browser, lambda d: _summary(d).get("runId") == run_id and len(_rows(d)) == 9)
    again = _rows(browser)
    assert [r["name"] for r in again] == [r["name"] for r in rows]
    assert again[1]["notes"].count("retry 1:") == 1 and "handled by retry" in again[1]["notes"]
    assert again[2]["notes"] == editor["notes"] and again[3]["notes"] == critic["notes"]
    assert again[1]["metrics"].startswith("10 tokens\n")
    assert [r["round"] for r in again[6:8]] == ["0", "1"]
    again_outputs = _outputs(browser)
    assert again_outputs == outputs and list(again_outputs) == list(outputs)
    assert SECRET not in browser.page_source
    headers = {"Authorization": f"Bearer {KEYS['review']}"}
    kept = httpx.get(f"{server.url}/v1/workflows/run/{run_id}/timeline", headers=headers)
    assert kept.status_code == 200 and SECRET not in kept.text and "***" in kept.text
    _shot(browser, "waterfall-from-history")


def test_required_inputs_are_checked_before_anything_is_sent(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {KEYS['review']}"}
    ) as c:
        before = c.get("/v1/workflows/logs").json()["total"]
        _open_app(browser, server, "review")
        _wait(browser, lambda d: d.find_elements(By.NAME, "plan"))
        browser.find_element(By.NAME, "plan").send_keys(PLAN)
        browser.find_element(By.ID, "run").click()
        _wait(browser, lambda d: _text(d, "#status") == "Topic is required.")
        assert browser.find_element(By.NAME, "topic").get_attribute("aria-invalid") == "true"
        assert browser.find_element(By.NAME, "plan").get_attribute("aria-invalid") is None
        assert _rows(browser) == [] and _text(browser, "#answer") == ""
        _shot(browser, "required")
        assert c.get("/v1/workflows/logs").json()["total"] == before  # nothing was run


def test_the_page_is_cleared_when_the_app_changes_or_a_request_fails(
    browser, server: Server
) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "story")
    _wait(browser, lambda d: d.find_elements(By.NAME, "topic"))
    browser.find_element(By.NAME, "topic").send_keys("a paper boat")
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: _text(d, "#status") == "succeeded")
    assert _text(browser, "#answer").startswith("echo: a paper boat")
    assert _outputs(browser)["text"] == "echo: a paper boat" and _rows(browser)
    _open_app(browser, server, "chat")  # another app: nothing of the story's is left
    _wait(browser, lambda d: d.find_element(By.ID, "chat").is_displayed())
    assert _text(browser, "#answer") == "" and _rows(browser) == []
    assert _outputs(browser) == {} and _summary(browser) == {}

    _open_app(browser, server, "story")
    _wait(browser, lambda d: d.find_elements(By.NAME, "topic"))
    browser.find_element(By.NAME, "topic").send_keys("a paper boat")
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: _text(d, "#status") == "succeeded")
    topic = browser.find_element(By.NAME, "topic")
    topic.clear()
    topic.send_keys("x" * 201)  # past the input's max_length: serve refuses the request
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: "topic" in _text(d, "#status").lower() and _rows(d) == [])
    assert browser.find_element(By.ID, "status").get_attribute("class") == "error"
    assert _text(browser, "#answer") == "" and _outputs(browser) == {}
    _shot(browser, "failed-request")


def test_history_lists_the_apps_runs_by_status_and_opens_one(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    headers = {"Authorization": f"Bearer {KEYS['story']}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
        body = {
            "inputs": {"topic": "kept for later"},
            "user": "console",
            "response_mode": "blocking",
        }
        done = c.post("/v1/workflows/run", json=body).json()
        kept = done["workflow_run_id"]
        # A stopped run: streamed, stopped after its first text.
        body = {**body, "inputs": {"topic": "[slow] a long tale"}, "response_mode": "streaming"}
        with c.stream("POST", "/v1/workflows/run", json=body) as stream:
            for line in stream.iter_lines():
                if line.startswith("data: ") and '"text_chunk"' in line:
                    task = json.loads(line[6:])["task_id"]
                    c.post(f"/v1/workflows/tasks/{task}/stop", json={"user": "console"})
                    break
        _wait(None, lambda _: c.get("/v1/workflows/logs?status=stopped").json()["total"] >= 1)
    _open_app(browser, server, "story")
    _wait(browser, lambda d: any(h["run"] == kept for h in _history(d)))
    assert {h["status"] for h in _history(browser)} >= {"succeeded", "stopped"}
    Select(browser.find_element(By.ID, "history-status")).select_by_value("stopped")
    _wait(browser, lambda d: {h["status"] for h in _history(d)} == {"stopped"})
    assert all(" · stopped · " in h["text"] for h in _history(browser))
    Select(browser.find_element(By.ID, "history-status")).select_by_value("succeeded")
    _wait(browser, lambda d: {h["status"] for h in _history(d)} == {"succeeded"})
    _click(browser, f'#history li[data-run="{kept}"]')
    _wait(browser, lambda d: _summary(d).get("runId") == kept)
    assert [r["name"] for r in _rows(browser)] == ["Start", "Writer", "End"]
    assert _rows(browser)[1]["metrics"].startswith("9 tokens\n")
    assert _outputs(browser)["text"] == "echo: kept for later"
    assert _summary(browser)["status"] == "succeeded"
    _shot(browser, "history")


def test_a_chatflow_streams_its_answer_and_lists_its_conversations(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "chat")
    _wait(browser, lambda d: d.find_element(By.ID, "chat").is_displayed())
    for turn, question in enumerate(["hello from the browser", "[count] and now?"], start=1):
        browser.find_element(By.ID, "query").send_keys(question)
        browser.find_element(By.ID, "run").click()
        expected = "echo: hello from the browser" if turn == 1 else "turn 2"
        _wait(browser, lambda d, e=expected: _text(d, "#answer") == e)
        _wait(browser, lambda d: _text(d, "#status") == "succeeded")
    turns = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#conversation .turn")]
    assert turns == [
        "hello from the browser",
        "echo: hello from the browser",
        "[count] and now?",
        "turn 2",
    ]
    rows = _rows(browser)
    assert [r["type"] for r in rows] == ["start", "llm", "answer"]
    assert all(r["status"] == "succeeded" for r in rows)
    assert "first token after" in rows[1]["metrics"] and rows[1]["time"].endswith(" s")
    # The conversation is in the app's history; opened again, its turns come back.
    _wait(browser, lambda d: any(h["conversation"] for h in _history(d)))
    conversation = _history(browser)[0]
    assert conversation["text"]  # its name (the first query, shortened)
    browser.find_element(By.ID, "new-conversation").click()
    assert browser.find_elements(By.CSS_SELECTOR, "#conversation .turn") == []
    _click(browser, f'#history li[data-conversation="{conversation["conversation"]}"]')
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#conversation .turn")) == 4)
    again = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#conversation .turn")]
    assert again == turns
    _wait(browser, lambda d: [r["type"] for r in _rows(d)] == ["start", "llm", "answer"])
    _shot(browser, "chatflow")


def test_the_easy_modes_run_from_the_console(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "easy_completion")
    _wait(browser, lambda d: d.find_elements(By.NAME, "product"))
    browser.find_element(By.NAME, "product").send_keys("blue mug")
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: _text(d, "#status") == "succeeded")
    assert _text(browser, "#answer").startswith("echo:")
    # A completion app streams no node events: its timeline comes from the store.
    _wait(browser, lambda d: any(r["type"] == "llm" for r in _rows(d)))
    summary = _summary(browser)
    assert re.fullmatch(r"[0-9a-f-]{36}", summary["runId"]) and int(summary["tokens"]) > 0
    _shot(browser, "completion")

    _open_app(browser, server, "easy_chat_advanced")
    _wait(browser, lambda d: d.find_element(By.ID, "chat").is_displayed())
    browser.find_element(By.ID, "query").send_keys("is the pool open?")
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: _text(d, "#status") == "succeeded")
    assert "is the pool open?" in _text(browser, "#answer")
    # Its node events, or (as Dify streams a chat app) its timeline from the store after.
    _wait(browser, lambda d: any(r["type"] == "llm" and "tokens" in r["metrics"] for r in _rows(d)))
    _wait(browser, lambda d: any(h["conversation"] for h in _history(d)))
    _shot(browser, "easy-chat")

    _open_app(browser, server, "easy_agent_chat")
    _wait(browser, lambda d: d.find_element(By.ID, "chat").is_displayed())
    browser.find_element(By.ID, "query").send_keys("what time is it in Oslo?")
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: _text(d, "#status") == "succeeded")
    assert "what time is it in Oslo?" in _text(browser, "#answer")
    # An agent app streams agent events, no node events: its timeline comes from the store.
    _wait(browser, lambda d: any(r["type"] == "agent" for r in _rows(d)))
    agent = [r for r in _rows(browser) if r["type"] == "agent"]
    assert len(agent) == 1 and "tokens" in agent[0]["metrics"]
    assert re.fullmatch(r"[0-9a-f-]{36}", _summary(browser)["runId"])
    _shot(browser, "easy-agent")


def test_a_workflow_with_a_file_input_runs_from_the_form(
    browser, server: Server, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    document = tmp_path / "brief.txt"
    document.write_text("the brief\n")
    _open_app(browser, server, "story")
    _wait(browser, lambda d: d.find_elements(By.NAME, "topic"))
    browser.find_element(By.NAME, "topic").send_keys("a paper boat")
    browser.find_element(By.NAME, "doc").send_keys(str(document))
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: _text(d, "#status") == "succeeded")
    answer = _text(browser, "#answer")
    # The end node shows the document as a link to the server, never a server path.
    assert answer.startswith("echo: a paper boat\n[brief.txt](http://127.0.0.1:")
    assert "/file-preview?" in answer and "file://" not in answer
    assert '"filename": "brief.txt"' in _outputs(browser)["doc"]
    _shot(browser, "workflow")


def test_the_stop_button_stops_a_run_and_the_timer_runs_meanwhile(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "story")
    _wait(browser, lambda d: d.find_elements(By.NAME, "topic"))
    browser.find_element(By.NAME, "topic").send_keys("[slow] a very long tale")
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: "w3" in _text(d, "#answer"))
    first = float(_text(browser, "#timer").split()[0])
    _wait(browser, lambda d: float(_text(d, "#timer").split()[0]) > first)  # it ticks
    assert _text(browser, "#status") == "running"
    assert _rows(browser)[1]["status"] == "running"
    browser.find_element(By.ID, "stop").click()
    _wait(browser, lambda d: _text(d, "#status").startswith("stopped"), timeout=5)
    assert _rows(browser)[-1]["status"] == "stopped"
    _shot(browser, "stopped")


def test_the_console_waits_for_the_first_token_visibly(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "story")
    _wait(browser, lambda d: d.find_elements(By.NAME, "topic"))
    browser.find_element(By.NAME, "topic").send_keys("[think] about it")  # 1.2 s of silence
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: _text(d, "#status") == "waiting for the first token…")
    assert browser.find_element(By.ID, "status").get_attribute("class") == "waiting"
    _shot(browser, "waiting")
    _wait(browser, lambda d: _text(d, "#status") == "succeeded")
    assert "first token after 1." in _rows(browser)[1]["metrics"]


def _tree(driver) -> list:  # type: ignore[no-untyped-def]
    """The waterfall as nested lists: [name, [[round, [...rows]], ...]] per row."""
    return driver.execute_script(
        """
        const tree = (parent) => [...parent.children].filter((n) => n.classList.contains('node')).map((n) => {
          const rounds = n.querySelector(':scope > .rounds');
          const name = n.querySelector(':scope > details > summary .name').textContent;
          if (!rounds) return name;
          return [name, [...rounds.children].map((r) => [r.dataset.round, tree(r)])];
        });
        return tree(document.getElementById('rows'));
        """
    )


def test_an_iteration_inside_a_loop_shows_under_each_loop_round(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "nested")
    _wait(browser, lambda d: d.find_elements(By.NAME, "plan"))
    browser.find_element(By.NAME, "plan").send_keys(PLAN)
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: _text(d, "#status") == "succeeded")
    each = ["Each step", [["0", ["Upper"]], ["1", ["Upper"]]]]
    expected = ["Start", ["Twice", [["0", [each]], ["1", [each]]]], "End"]
    assert _tree(browser) == expected
    _shot(browser, "nested")
    run_id = _summary(browser)["runId"]  # the same shape from the store
    _wait(browser, lambda d: any(h["run"] == run_id for h in _history(d)))
    _click(browser, f'#history li[data-run="{run_id}"]')
    _wait(browser, lambda d: _summary(d).get("runId") == run_id and _tree(d) == expected)


def test_a_busy_server_shows_the_probes_verdict_and_a_default_value_stands_in(
    browser, server: Server
) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "patient")
    _wait(browser, lambda d: "waiting" not in _text(d, "#status"))  # the form is loaded
    browser.find_element(By.ID, "run").click()
    # Past the first-token budget the probe says busy: the row says the node waits.
    _wait(browser, lambda d: "waiting: " in "".join(r["notes"] for r in _rows(d)))
    thinker = _rows(browser)[1]
    assert thinker["notes"].startswith("waiting for the first token…\nwaiting: ")
    assert "mark waiting" in thinker["marks"] and thinker["status"] == "running"
    assert _text(browser, "#status") == "waiting for the first token…"
    _shot(browser, "busy-server")
    _wait(browser, lambda d: _text(d, "#status") == "partial-succeeded")
    thinker, guess = _rows(browser)[1:3]
    assert "waiting for the first token…" not in thinker["notes"]
    assert thinker["notes"].startswith("waiting: ") and "first token after 1." in thinker["metrics"]
    assert _outputs(browser) == {"text": "considered at length", "guess": "(no guess)"}
    # The route that is down: its error in its row, its default value took over.
    assert guess["status"] == "exception" and "Connection refused" in guess["notes"]
    assert guess["notes"].endswith("handled by default value")


def test_a_run_that_goes_on_after_a_form_is_answered_is_followed(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    """When the human-input helper says a form was answered, the console follows the
    run's events from `GET /v1/workflow/{id}/events` (here a run started elsewhere)."""
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "story")
    _wait(browser, lambda d: d.find_elements(By.NAME, "topic"))
    headers = {"Authorization": f"Bearer {KEYS['story']}"}
    body = {"inputs": {"topic": "[medium] go on"}, "user": "console", "response_mode": "streaming"}
    with (
        httpx.Client(base_url=server.url, headers=headers, timeout=30) as c,
        c.stream("POST", "/v1/workflows/run", json=body) as started,
    ):
        first = next(line for line in started.iter_lines() if line.startswith("data: "))
        run_id = json.loads(first[6:])["workflow_run_id"]
        browser.execute_script(
            "document.getElementById('human-input').dispatchEvent(new CustomEvent("
            "'firstgate:form-submitted', {bubbles: true, detail: {workflowRunId: arguments[0]}}))",
            run_id,
        )
        _wait(browser, lambda d: _text(d, "#status") == "running" and "m3" in _text(d, "#answer"))
        _wait(browser, lambda d: _text(d, "#status") == "succeeded")
    assert _summary(browser)["runId"] == run_id
    assert [r["name"] for r in _rows(browser)] == ["Start", "Writer", "End"]
    assert _text(browser, "#answer").startswith("m0 m1 m2 m3")


@pytest.mark.parametrize("browser", ["de-DE"], indirect=True)
def test_the_console_speaks_the_browsers_language(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "review")
    _wait(browser, lambda d: d.find_element(By.ID, "run").text == "Ausführen")
    assert browser.find_element(By.ID, "stop").text == "Stoppen"
    headings = [h.text for h in browser.find_elements(By.TAG_NAME, "h2")]
    assert "Verlauf" in headings and "Ausgaben" in headings
    _wait(browser, lambda d: d.find_elements(By.NAME, "plan"))
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: _text(d, "#status").startswith("Topic ist erforderlich."))
    _fill_review(browser, "Papierboote")
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: _text(d, "#status") == "partial-succeeded")
    editor, critic = _rows(browser)[2:4]
    # The runtime's own words (a fallback decision) in the browser's language too.
    swap = "Ausweichroute (swap): shaky ist fehlgeschlagen (ConnectError); es wird zu local gewechselt."
    assert swap in editor["notes"]
    assert critic["notes"].endswith("behandelt durch Fehlerzweig")
    assert editor["metrics"].startswith("9 Tokens\n")
    _shot(browser, "german")


def test_a_human_input_request_goes_to_the_form_helper(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    """`serve/console/human_input_form.js` is another part's: the page loads it when the
    server has it and hands it the event, its place and the submit URL."""
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "review")
    _wait(browser, lambda d: d.find_elements(By.NAME, "plan"))
    # The helper this server ships is loaded by the page (a server without it: no harm).
    _wait(
        browser, lambda d: d.execute_script("return typeof window.firstgateHumanInput === 'object'")
    )
    assert browser.execute_script("return typeof window.firstgateHumanInput.render") == "function"
    handed = browser.execute_script(
        """
        const seen = [];
        window.firstgateHumanInput = { render: (event, place, url) => seen.push([event.event, place.id, url]) };
        onEvent({ event: "human_input_required", data: { form_token: "tok/1", node_id: "ask" } }, 0);
        delete window.firstgateHumanInput;
        onEvent({ event: "human_input_required", data: { form_token: "tok/2" } }, 0);  // no helper: no harm
        return seen;
        """
    )
    assert handed == [["human_input_required", "human-input", "/v1/form/human_input/tok%2F1"]]
