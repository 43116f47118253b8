"""The app as a user sees it: started with README's command, driven in headless Chromium.

Needs Debian's chromium (/usr/bin/chromium; `.ci/run` installs it) and the prepared offline model.
Playwright is used only as a driver for that system browser: never `playwright install`.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    """`python app.py` in a subprocess, on a free loopback port; yields its URL."""
    port = _free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    log_path = tmp_path_factory.mktemp("app") / "app.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 240  # a first start converts the offline model
    try:
        while time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"app.py exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"app.py did not start listening:\n{log_path.read_text()[-3000:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def page(app_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.goto(app_url, wait_until="domcontentloaded")
        page.wait_for_selector("text=Run", timeout=60_000)
        yield page
        browser.close()


def test_default_run_shows_three_kinds_of_tokens_and_three_charts(page):
    """The default preset (SmolLM2-135M-Instruct, prompt lookup, the typo-fixing example) at temperature 0."""
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_selector("#sv-summary >> text=Done", timeout=180_000)
    html = page.inner_html("#sv-tokens")
    for kind in ("sv-accepted", "sv-resampled", "sv-bonus"):
        assert kind in html, f"no {kind} token in the output"
    assert "sv-rejected" in html  # the rejected draft token is shown struck through
    summary = page.inner_text("#sv-summary")
    assert re.search(r"acceptance rate \(accepted ÷ proposed\)\s+0\.\d+", summary), summary
    assert re.search(r"per-token α \(accepted ÷ tested\)\s+0\.\d+", summary), summary
    assert "plain decoding tokens/s" in summary and "measuring" not in summary
    for plot in ("#sv-alpha", "#sv-tpp", "#sv-speedup"):
        assert page.locator(f"{plot} .js-plotly-plot").count() == 1, f"{plot} has no Plotly chart"
        assert page.locator(f"{plot} .main-svg").count() >= 1
    text = page.inner_text("#sv-alpha")
    assert "running acceptance rate" in text and "per-token α" in text


def test_empty_prompt_gives_a_clear_message_not_a_traceback(page):
    page.locator("#sv-prompt textarea").fill("   ")
    page.get_by_role("button", name="Run", exact=True).click()
    toast = page.wait_for_selector("text=The prompt is empty", timeout=30_000)
    assert toast is not None
    assert "Traceback" not in page.content()
