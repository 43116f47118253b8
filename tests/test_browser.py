"""The app as a user sees it: started with README's command, driven in headless Chromium.

Needs Debian's chromium (/usr/bin/chromium; `.ci/run` installs it) and the prepared offline model.
Playwright is used only as a driver for that system browser: never `playwright install`.
"""

from __future__ import annotations

import os
import re
import time

import pytest

from scripts.browser_launch import CHROMIUM, LAUNCH_ARGS


pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed"),
]


#: The Run tab's collapsed panels the tests reach into: More settings and the figure sections. A
#: closed gr.Accordion renders nothing inside it, so its components exist only once it is opened.
PANELS = ("sv-more-settings", "sv-time-panel", "sv-rules-panel", "sv-race-panel")

#: Open the closed accordions named by elem_id (a visitor's click on each header).
OPEN_PANELS = """(ids) => {
  for (const id of ids) {
    const header = document.querySelector(`#${id} > .label-wrap`);
    if (header && !header.classList.contains('open')) header.click();
  }
}"""


def wait_until_live(page, panels: tuple[str, ...] = PANELS) -> None:
    """Wait for the page's load events to have run (the first adds the stylesheet,
    draw/js/style.js, as ``#sv-style``): a click before then can be lost (seen once: a Run that
    never reached the server, on a busy machine); and for the recorded run's replay to end. Then
    open ``panels`` (:data:`PANELS`; ``()`` for the page as a visitor first sees it)."""
    page.wait_for_selector("#sv-style", state="attached", timeout=120_000)
    # The recorded run the page opens on (no query) replaces the token box's contents for a few
    # seconds: an element read in between can be detached by the next update (seen: a legend chip's
    # colour read as ''). Wait for its last update, which carries the done mark.
    page.wait_for_function("() => location.search.length > 1 || !!document.querySelector('#sv-tokens .sv-done')",
                           timeout=60_000)
    open_panels(page, *panels)


def open_panels(page, *ids: str) -> None:
    """Open the collapsed panels ``ids`` (elem_ids of gr.Accordion) that are on the page and closed,
    and wait for More settings' fields when it was one of them."""
    page.evaluate(OPEN_PANELS, list(ids))
    if "sv-more-settings" in ids and page.locator("#sv-more-settings").count():
        page.wait_for_selector("#sv-max-new", state="attached", timeout=30_000)


def set_number(page, elem_id: str, value) -> None:
    """Type ``value`` into the number box of component ``elem_id`` and press Enter (the browser
    modules' one way to set a number)."""
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def run_to_done(page, timeout_s: float = 300, status: str = "#sv-summary", button=None) -> None:
    """Press Run (or ``button``, a locator) and wait for this run's Done in ``status``: first for the
    previous run's Done to leave, or a page that already showed one would pass at once, before the
    run started (CI: a test went on while the run it asked for was still to come, and the next
    test's Run queued behind it)."""
    (button or page.get_by_role("button", name="Run", exact=True)).click()
    page.wait_for_function("(sel) => !document.querySelector(sel).innerText.includes('Done')", arg=status,
                           timeout=60_000)
    page.wait_for_selector(f"{status} >> text=Done", timeout=timeout_s * 1000)


@pytest.fixture(scope="module")
def app_url(shared_app_url):
    """The app's URL: one `python app.py` for every browser module of the session
    (``shared_app_url`` in tests/conftest.py), so each module pays for a browser, not a server start."""
    return shared_app_url


#: A page function for ``page.wait_for_function(HAS_TEXT, arg=[selector, text])``: the element exists and shows the text.
HAS_TEXT = "([sel, want]) => document.querySelector(sel) && document.querySelector(sel).innerText.includes(want)"


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for a module whose tests each open their own page (a fresh sessionStorage)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def page(app_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.goto(app_url, wait_until="domcontentloaded")
        page.wait_for_selector("text=Run", timeout=60_000)
        wait_until_live(page)
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
    for plot in ("#sv-alpha", "#sv-tpp", "#sv-speedup", "#sv-positions", "#sv-rules", "#sv-lengths", "#sv-calibration"):
        assert page.locator(f"{plot} .js-plotly-plot").count() == 1, f"{plot} has no Plotly chart"
        assert page.locator(f"{plot} .main-svg").count() >= 1
    text = page.inner_text("#sv-alpha")
    assert "running acceptance rate" in text and "per-token α" in text
    assert "four rules" in page.inner_text("#sv-rules") and "zero-accept share" in summary
    # While a run streams, off-screen charts skip the browser's rendering work (styles.CHART_CSS);
    # after it they are whole again, drawn at their full size.
    chart = page.locator("#sv-calibration .js-plotly-plot")
    page.wait_for_function("() => !document.documentElement.classList.contains('sv-streaming')", timeout=10_000)
    assert chart.evaluate("(el) => getComputedStyle(el).contentVisibility") == "visible"
    box = page.locator("#sv-calibration .main-svg").first.bounding_box()
    assert box and box["width"] > 200 and box["height"] >= 250, box


RUN_CHARTS = ("#sv-alpha", "#sv-tpp", "#sv-speedup", "#sv-positions", "#sv-time", "#sv-rules", "#sv-lengths",
              "#sv-calibration", "#sv-race")


def test_a_new_figure_redraws_each_chart_in_place(page):
    """gradio's Plot mounts a new ``<div>`` for every new figure and drew it from nothing (after a
    wasted redraw of the old one); the page's ONE_DRAW_JS keeps each chart's Plotly element and
    redraws it in place, inside gradio's new div. After the default run: mark each Run-tab chart,
    run again, and the same elements show the new run, one chart each, whole."""
    marks = page.evaluate("""(sels) => sels.map((sel) => {
      const chart = document.querySelector(sel + ' .js-plotly-plot');
      if (chart) chart.dataset.svMark = sel;
      return !!chart;
    })""", list(RUN_CHARTS))
    assert all(marks), dict(zip(RUN_CHARTS, marks))
    run_to_done(page, timeout_s=180)
    # The run waits for the race to be cleared (run_tab.empty_race); its lanes follow its end.
    page.wait_for_function("() => (document.querySelector('#sv-race .js-plotly-plot').data || [])"
                           ".some((t) => (t.name || '').startsWith('verify') && t.x && t.x.length)", timeout=60_000)
    for sel in RUN_CHARTS:
        charts = page.locator(f"{sel} .js-plotly-plot")
        assert charts.count() == 1, f"{sel}: {charts.count()} charts"
        assert charts.first.get_attribute("data-sv-mark") == sel, f"{sel} was drawn anew, not redrawn in place"
        assert page.locator(f"{sel} [data-testid=plotly] .js-plotly-plot").count() == 1  # inside gradio's div
        assert page.locator(f"{sel} .main-svg").count() >= 1
    # The running α and the per-token α: the α chart's last figure may land after the race's on a
    # busy machine (each output is its own update), so wait for it rather than read it once.
    page.wait_for_function("() => (document.querySelector('#sv-alpha .js-plotly-plot').data || []).length >= 2",
                           timeout=30_000)
    assert page.locator("#sv-alpha .js-plotly-plot").first.get_attribute("data-sv-mark") == "#sv-alpha"


def _number_after(text: str, name: str) -> float:
    match = re.search(re.escape(name) + r"\s*=\s*\**([0-9.]+(?:e[-+]?[0-9]+)?)", text)
    assert match, (name, text)
    return float(match.group(1))


def _exported_trace(page, app_url) -> dict:
    """Export the run through the page and read back the trace JSON it offers for download."""
    page.locator("#sv-export").click()
    link = page.locator("#sv-export-files a[download='specviz-trace.json']")
    link.first.wait_for(timeout=60_000)
    href = link.first.get_attribute("href")
    response = page.request.get(href if href.startswith("http") else app_url + href)
    assert response.ok, response.status
    return response.json()


def test_clicking_tokens_opens_the_inspector_with_the_trace_numbers(page, app_url):
    """After the default run: click an accepted token, then a struck-through rejected draft; the
    inspector's p_draft, p_target, acceptance probability and uniform equal the exported trace's."""
    page.locator("summary, button, span", has_text="Replay, export and saved traces").first.click()
    trace = _exported_trace(page, app_url)
    for selector, verdict in (("#sv-tokens .sv-out .sv-accepted", "accepted"),
                                ("#sv-tokens .sv-out .sv-rejected", "rejected")):
        token = page.locator(selector).first
        r, slot = int(token.get_attribute("data-r")), int(token.get_attribute("data-i"))
        token.click()
        inspector = page.locator("#sv-inspector")
        inspector.locator(f"text=Verify pass {r + 1}").wait_for(timeout=30_000)
        text = inspector.inner_text()
        assert verdict in text
        drafted = trace["rounds"][r]["drafted"][slot]
        assert _number_after(text, "p_draft") == pytest.approx(drafted["p_draft"], abs=5e-5)
        assert _number_after(text, "p_target") == pytest.approx(drafted["p_target"], abs=5e-5)
        assert _number_after(text, "min(1, p_target / p_draft)") == pytest.approx(drafted["accept_prob"], abs=5e-5)
        assert _number_after(text, "uniform draw u") == pytest.approx(drafted["uniform"], abs=5e-5)
        assert page.locator("#sv-inspector-plot .js-plotly-plot").count() == 1
    assert "residual" in page.locator("#sv-inspector").inner_text()


def test_stop_ends_the_run_and_the_next_run_starts_at_once(page):
    """Stop in the middle of a run: the status says Stopped, the tokens stop growing and stay on
    screen, and no "Done" appears; a second, short run then completes."""
    number = page.locator("#sv-max-new input[type=number]")
    number.fill("150")
    number.press("Enter")
    page.locator("#sv-prompt textarea").fill("Write a long story about a lighthouse keeper and the sea.")
    assert page.locator("#sv-prompt textarea").input_value().startswith("Write a long story")
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_selector("#sv-summary >> text=Generating", timeout=180_000)
    page.wait_for_function("document.querySelectorAll('#sv-tokens .sv-out .sv-tok').length > 5", timeout=180_000)
    page.get_by_role("button", name="Stop", exact=True).click()
    page.wait_for_selector("#sv-summary >> text=Stopped", timeout=30_000)  # stop_run's status
    stopped = page.locator("#sv-tokens .sv-out .sv-tok").count()
    time.sleep(2.0)
    assert page.locator("#sv-tokens .sv-out .sv-tok").count() == stopped > 5
    assert "Done" not in page.inner_text("#sv-summary")
    number.fill("8")
    number.press("Enter")
    started = time.time()
    run_to_done(page, timeout_s=120)
    assert time.time() - started < 120


def test_empty_prompt_gives_a_clear_message_not_a_traceback(page):
    page.locator("#sv-prompt textarea").fill("   ")
    page.get_by_role("button", name="Run", exact=True).click()
    toast = page.wait_for_selector("text=The prompt is empty", timeout=30_000)
    assert toast is not None
    assert "Traceback" not in page.content()
