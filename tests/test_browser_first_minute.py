"""The first minute on a 1366 × 768 projector, in a real browser: coloured tokens within 5 s of the
page opening (the recorded run of the offline pair replays as it opens, nothing to load or run), the
live run's stage named inside the token box within 1 s of pressing Run, and at most 8 controls on
the Run tab before "More settings" is opened.

Shares the browser modules' one app (tests/conftest.py, ``shared_app_url``); each test opens its own page.
"""

from __future__ import annotations

import os
import time

import pytest
from test_browser import CHROMIUM, app_url, browser, wait_until_live  # noqa: F401  (fixtures: the app, one Chromium)

from scripts.run_to_stage import STAGE_WATCH  # the observer the script times each press with

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

PROJECTOR = {"width": 1366, "height": 768}

#: The Run tab's controls a visitor can see before opening "More settings", in page order: every
#: visible button, text field, number, slider and dropdown of the tab's panel that lies before the
#: accordion (the slider's number box and its reset button belong to the slider: one control).
CONTROLS_BEFORE_MORE = """() => {
  const more = document.querySelector('#sv-more-settings');
  const panel = more.closest('[role=tabpanel]') || document.body;
  const seen = new Set();
  for (const el of panel.querySelectorAll('button, input, textarea, select')) {
    if (!el.getClientRects().length || el.closest('#sv-more-settings')) continue;
    if (!(el.compareDocumentPosition(more) & Node.DOCUMENT_POSITION_FOLLOWING)) continue;
    const block = el.closest('.block') || el;
    seen.add(block);
  }
  return [...seen].map(b => (b.id || b.textContent.trim().slice(0, 30) || b.className).toString());
}"""


@pytest.fixture
def projector(browser):  # noqa: F811
    page = browser.new_page(viewport=PROJECTOR)
    yield page
    page.close()


def test_the_page_opens_on_coloured_tokens_within_five_seconds(projector, app_url):  # noqa: F811
    """From asking for the page to its first coloured token (a token of the recorded run, not the
    legend's key): at most 5 s in the best of three openings. Best of three because the suite's other
    worker keeps both cores busy meanwhile, and a page of 359 components takes gradio's frontend 2-4 s
    to build on this CPU even alone (measured 1.9-4.7 s to the first token on a quiet machine)."""
    times = []
    for _ in range(3):
        started = time.monotonic()
        projector.goto(app_url, wait_until="commit")
        projector.wait_for_selector("#sv-tokens .sv-out .sv-accepted", timeout=30_000)
        times.append(time.monotonic() - started)
        if times[-1] <= 5.0:
            break
    assert min(times) <= 5.0, f"the first coloured token came {', '.join(f'{t:.1f}' for t in times)} s after the page was asked for"
    # the summary says what it is once the replay's first update has drawn it
    projector.wait_for_selector("#sv-summary >> text=A recorded run", timeout=10_000)
    # the recorded run is the same-family pair's, on the first screen
    box = projector.locator("#sv-tokens").bounding_box()
    assert box is not None and box["y"] < PROJECTOR["height"], box
    # and the token box says whose run it is, since the prompt at left is not the one it answers
    caption = projector.locator("#sv-tokens .sv-caption")
    assert "A recorded run" in caption.inner_text() and "is_prime" in caption.inner_text()
    assert caption.bounding_box()["y"] < PROJECTOR["height"]


def test_the_live_runs_stage_is_named_in_the_token_box_within_a_second(projector, app_url):  # noqa: F811
    """From pressing Run to the run's stage in the token box: at most 1 s, in the better of two runs
    (the suite's other worker keeps both cores busy meanwhile; one run in a full suite took 1.17 s
    before the press's five chained events became one; 0.16-0.24 s on a quiet machine after).
    The stage is the server's own first update ("Loading the models for <target>…" on a first run,
    "Preparing <pair>…" after), not anything the page writes before the server answers."""
    projector.goto(app_url, wait_until="domcontentloaded")
    wait_until_live(projector)
    projector.wait_for_selector("#sv-summary >> text=A recorded run", timeout=60_000)
    run = projector.get_by_role("button", name="Run", exact=True)
    seen = []
    for _ in range(2):
        # The stage can be on screen for less than a poll (a warm pair, a baseline already timed):
        # an observer notes the first moment it is in the token box.
        projector.evaluate(STAGE_WATCH)
        run.click()
        projector.wait_for_function("() => window.svStage !== null", timeout=30_000)
        seen.append(projector.evaluate("() => window.svStage"))
        assert seen[-1]["text"].strip(), seen[-1]  # "Loading the models for …", "Preparing …"
        projector.wait_for_selector("#sv-summary >> text=Done", timeout=300_000)
        if seen[-1]["t"] <= 1000:
            break
    assert min(s["t"] for s in seen) <= 1000, f"the stage came {[round(s['t']) for s in seen]} ms after Run"


def test_the_run_tab_shows_at_most_eight_controls_before_more_settings(projector, app_url):  # noqa: F811
    projector.goto(app_url, wait_until="domcontentloaded")
    wait_until_live(projector, panels=())  # the page as a visitor first sees it
    controls = projector.evaluate(CONTROLS_BEFORE_MORE)
    assert 5 <= len(controls) <= 8, controls  # prompt, Run, Stop, model pair, drafter, K, temperature
    assert "sv-prompt" in controls and "sv-k" in controls and "sv-temperature" in controls


def test_a_number_typed_outside_a_sliders_range_is_said_not_clamped_silently(projector, app_url):  # noqa: F811
    """A newcomer typed K = 40: gradio's slider clamped it to its maximum when the box lost focus,
    without a word, and the run used the maximum. The page says so under the slider as soon as the
    number is typed, and the note goes once the number is in range again."""
    projector.goto(app_url, wait_until="domcontentloaded")
    wait_until_live(projector, panels=())
    for elem, typed in (("sv-k", "40"), ("sv-temperature", "-1")):
        box = projector.locator(f"#{elem} input[type=number]")
        low, high = box.get_attribute("min"), box.get_attribute("max")
        used = high if float(typed) > float(high) else low
        box.fill(typed)
        note = projector.locator(f"#{elem} .sv-range-note")
        note.wait_for(timeout=10_000)
        assert f"runs from {low} to {high} here: {typed} becomes {used}." in note.inner_text(), note.inner_text()
        projector.locator("#sv-prompt textarea").click()  # the box loses focus: gradio clamps it
        projector.wait_for_function("([sel, v]) => Number(document.querySelector(sel).value) === Number(v)",
                                    arg=[f"#{elem} input[type=number]", used], timeout=10_000)
        assert note.count() == 1  # still said after the clamp
        box.fill(low)
        projector.wait_for_function("(sel) => !document.querySelector(sel)", arg=f"#{elem} .sv-range-note",
                                    timeout=10_000)
    # a fraction for K: the box keeps it and Run refuses it, so the note says so before Run does
    box = projector.locator("#sv-k input[type=number]")
    box.fill("2.5")
    note = projector.locator("#sv-k .sv-range-note")
    note.wait_for(timeout=10_000)
    assert "takes whole numbers from 1 to" in note.inner_text() and "2.5 is not one" in note.inner_text()
    box.fill("4")
    projector.wait_for_function("() => !document.querySelector('#sv-k .sv-range-note')", timeout=10_000)
