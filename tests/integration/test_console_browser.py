"""The run console in a real browser: headless Chromium (Debian's chromium and
chromium-driver) driven through selenium's WebDriver client, against a real
`firstgate serve` process and a fake model process. A chatflow over two turns,
a workflow with a file input, and the stop button. Screenshots are kept under
`FIRSTGATE_ARTIFACTS` (`.ci/run` prints where)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serve_support import KEYS, Server, echo_model, serve

pytestmark = pytest.mark.slow

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
    "--window-size=1400,1000",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with echo_model() as base_url, serve(tmp_path_factory.mktemp("console"), base_url) as running:
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

    driver.get(server.url + "/")
    _wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#app option")) == 2)
    Select(driver.find_element(By.ID, "app")).select_by_value(stem)
    key = driver.find_element(By.ID, "key")
    key.clear()
    key.send_keys(KEYS[stem])
    driver.execute_script("document.getElementById('key').dispatchEvent(new Event('change'))")


def test_a_chatflow_streams_its_answer_and_keeps_the_conversation(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "chat")
    _wait(browser, lambda d: d.find_element(By.ID, "chat").is_displayed())
    for turn, question in enumerate(["hello from the browser", "[count] and now?"], start=1):
        browser.find_element(By.ID, "query").send_keys(question)
        browser.find_element(By.ID, "run").click()
        expected = "echo: hello from the browser" if turn == 1 else "turn 2"
        _wait(browser, lambda d, e=expected: d.find_element(By.ID, "answer").text == e)
        _wait(browser, lambda d: d.find_element(By.ID, "status").text == "succeeded")
    turns = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#conversation .turn")]
    assert turns == [
        "hello from the browser",
        "echo: hello from the browser",
        "[count] and now?",
        "turn 2",
    ]
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline tbody tr")
    assert [r.find_elements(By.TAG_NAME, "td")[2].text for r in rows] == ["start", "llm", "answer"]
    assert all(r.find_elements(By.TAG_NAME, "td")[3].text == "succeeded" for r in rows)
    model_row = rows[1].find_elements(By.TAG_NAME, "td")
    assert "first token after" in model_row[4].text and model_row[5].text.endswith(" s")
    assert _shot(browser, "chatflow").stat().st_size > 0


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
    _wait(browser, lambda d: d.find_element(By.ID, "status").text == "succeeded")
    answer = browser.find_element(By.ID, "answer").text
    # The end node shows the document as a link to the server, never a server path.
    assert answer.startswith("echo: a paper boat\n[brief.txt](http://127.0.0.1:")
    assert "/file-preview?" in answer and "file://" not in answer
    _shot(browser, "workflow")


def test_the_stop_button_stops_a_run(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "story")
    _wait(browser, lambda d: d.find_elements(By.NAME, "topic"))
    browser.find_element(By.NAME, "topic").send_keys("[slow] a very long tale")
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: "w3" in d.find_element(By.ID, "answer").text)
    browser.find_element(By.ID, "stop").click()
    _wait(browser, lambda d: d.find_element(By.ID, "status").text.startswith("stopped"), timeout=5)
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline tbody tr")
    assert rows[-1].find_elements(By.TAG_NAME, "td")[3].text == "stopped"
    _shot(browser, "stopped")


@pytest.mark.parametrize("browser", ["de-DE"], indirect=True)
def test_the_console_speaks_the_browsers_language(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "chat")
    _wait(browser, lambda d: d.find_element(By.ID, "run").text == "Ausführen")
    assert browser.find_element(By.ID, "stop").text == "Stoppen"
    assert browser.find_element(By.ID, "new-conversation").text == "Neue Unterhaltung"
    _shot(browser, "german")


def test_the_timeline_shows_a_retry(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    _open_app(browser, server, "story")
    _wait(browser, lambda d: d.find_elements(By.NAME, "topic"))
    browser.find_element(By.NAME, "topic").send_keys("[flaky] try again")
    browser.find_element(By.ID, "run").click()
    _wait(browser, lambda d: d.find_element(By.ID, "status").text == "succeeded")
    writer = browser.find_elements(By.CSS_SELECTOR, "#timeline tbody tr")[1]
    events = writer.find_elements(By.TAG_NAME, "td")[4].text
    assert "retry 1:" in events and "first token after" in events
    assert browser.find_element(By.ID, "answer").text.startswith("echo: [flaky] try again")
    _shot(browser, "retry")
