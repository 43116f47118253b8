"""The classroom in a real browser (headless Debian Chromium, see tests/test_browser.py): a
Playground link opens those values (2.38 tokens per pass, 1.19×), the guided tour moves on when the
learner does the step's action, and the colour-blind-safe switch changes the accepted colour."""

from __future__ import annotations

import os

import pytest
from test_browser import CHROMIUM, app_url, browser, wait_until_live  # noqa: F401  (fixtures: the app started once, one Chromium)
from test_browser import HAS_TEXT as _HAS_TEXT

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]


@pytest.fixture
def fresh(browser, app_url):  # noqa: F811
    """A new page (its own sessionStorage) opening the app at a query: fresh("?tab=…")."""
    pages = []

    def open_(query: str = ""):
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        pages.append(page)
        page.goto(app_url + "/" + query, wait_until="domcontentloaded")
        page.wait_for_selector("#sv-tour-btn", timeout=60_000)
        wait_until_live(page)
        return page

    yield open_
    for page in pages:
        page.close()


def test_a_playground_link_opens_those_values(fresh):
    page = fresh("?tab=playground&alpha=0.6&k=5&c=0.2&v=1")
    page.wait_for_function(_HAS_TEXT, arg=["#sv-pg-figures", "expected speedup"], timeout=30_000)
    page.wait_for_function(_HAS_TEXT, arg=["#sv-pg-figures", "1.19×"], timeout=30_000)
    text = page.inner_text("#sv-pg-figures")
    assert "2.38 expected tokens per pass · 1.19× expected speedup" in text, text
    assert page.get_by_role("tab", name="Playground").get_attribute("aria-selected") == "true"
    assert page.locator("#sv-pg-alpha input[type=number]").input_value() == "0.6"
    # The page gives the same link back.
    page.locator("#sv-pg-copy").click()
    box = page.locator("#sv-pg-copy-box textarea, #sv-pg-copy-box input").first
    page.wait_for_function("(el) => el.value.startsWith('http')", arg=box.element_handle(), timeout=30_000)
    assert box.input_value().endswith("/?tab=playground&alpha=0.6&k=5&c=0.2&v=1")


def test_a_bad_link_is_ignored_with_a_note(fresh):
    page = fresh("?tab=nowhere&k=lots")
    page.wait_for_function(_HAS_TEXT, arg=["#sv-link-note", "is not a tab here"], timeout=30_000)
    note = page.inner_text("#sv-link-note")
    assert "k is not a number" in note and "lots" not in note  # refused by the parameter's name, not echoed
    assert page.get_by_role("tab", name="Run").get_attribute("aria-selected") == "true"


def test_the_tour_moves_on_when_the_learner_does_the_action(fresh):
    page = fresh()
    page.locator("#sv-tour-btn").click()
    page.wait_for_selector("#sv-tour[data-step='0']", timeout=10_000)
    assert "press Run" in page.inner_text("#sv-tour")
    page.keyboard.press("Escape")
    page.wait_for_selector("#sv-tour", state="hidden")
    # Jump to the step "open the Playground tab" (as Skip would), then do its action and the next.
    page.evaluate("() => window.svTour.go(5)")
    assert "open the Playground tab" in page.inner_text("#sv-tour")
    page.get_by_role("tab", name="Playground").click()
    page.wait_for_selector("#sv-tour[data-step='6']", timeout=10_000)
    box = page.locator("#sv-pg-alpha input[type=number]")
    box.fill("0.8")
    box.press("Enter")
    page.wait_for_selector("#sv-tour[data-step='7']", timeout=10_000)
    # Its place survives a reload (sessionStorage).
    page.reload(wait_until="domcontentloaded")
    page.wait_for_selector("#sv-tour[data-step='7']", timeout=60_000)


def test_a_tour_step_on_another_tab_says_to_go_back_there(fresh):
    """A newcomer at "click any token" opened Lessons and the tour still asked for a token there."""
    page = fresh()
    page.locator("#sv-tour-btn").click()
    page.evaluate("() => window.svTour.go(1)")
    page.wait_for_selector("#sv-tour[data-step='1']", timeout=10_000)
    assert "go back" not in page.inner_text("#sv-tour .sv-tour-do")
    page.get_by_role("tab", name="Lessons").click()
    page.wait_for_selector("#sv-tour .sv-tour-do >> text=go back to the Run tab", timeout=10_000)
    assert page.locator("#sv-tour[data-step='1']").count() == 1  # the step stays; only its words change
    page.get_by_role("tab", name="Run").click()
    page.wait_for_function("() => !document.querySelector('#sv-tour .sv-tour-do').innerText.includes('go back')",
                           timeout=10_000)
    assert "click any token" in page.inner_text("#sv-tour .sv-tour-do")
    # A step whose buttons sit in a closed section of the open tab is not sent "back" to that tab.
    page.evaluate("() => window.svTour.go(3)")
    page.wait_for_selector("#sv-tour[data-step='3']", timeout=10_000)
    assert page.locator("#sv-replay-next").count() == 0 or not page.locator("#sv-replay-next").is_visible()
    page.wait_for_timeout(1000)  # past both re-checks after the last tab click
    assert "go back" not in page.inner_text("#sv-tour .sv-tour-do")
    assert "Replay, export and saved traces" in page.inner_text("#sv-tour .sv-tour-do")
    page.get_by_role("tab", name="Playground").click()
    page.wait_for_selector("#sv-tour .sv-tour-do >> text=go back to the Run tab", timeout=10_000)


#: The border colour a Watch-a-pass chip of this kind gets from the page's stylesheet.
_CHIP_COLOUR = """(kind) => {
  const chip = document.createElement('span');
  chip.className = 'sv-chip sv-w-' + kind;
  document.body.appendChild(chip);
  const colour = getComputedStyle(chip).borderTopColor;
  chip.remove();
  return colour;
}"""


def test_the_colour_blind_switch_changes_the_accepted_colour(fresh):
    page = fresh()
    token = page.locator(".sv-legend .sv-accepted").first
    colour = "(el) => getComputedStyle(el).borderBottomColor"
    assert token.evaluate(colour) == "rgb(46, 158, 91)"  # green
    assert page.evaluate(_CHIP_COLOUR, "accepted") == "rgb(46, 158, 91)"  # Watch a pass's chips: one palette
    page.locator("#sv-cb input").check()
    page.wait_for_function("() => document.documentElement.classList.contains('sv-cb')", timeout=10_000)
    assert token.evaluate(colour) == "rgb(0, 114, 178)"  # Okabe–Ito blue
    assert page.evaluate(_CHIP_COLOUR, "accepted") == "rgb(0, 114, 178)"  # the switch reaches the chips too
    assert page.evaluate(_CHIP_COLOUR, "rejected") == "rgb(213, 94, 0)"


def test_a_lesson_link_sets_up_the_run_tab(fresh):
    page = fresh("?lesson=early_exit")
    page.wait_for_selector("#sv-lesson-note >> text=almost never guess", timeout=30_000)
    assert page.get_by_role("tab", name="Run").get_attribute("aria-selected") == "true"
    assert "Write a short poem" in page.locator("#sv-prompt textarea").input_value()


def test_after_a_run_the_race_lanes_fill_and_a_stretch_is_highlighted_by_keyboard(fresh):
    page = fresh()
    box = page.locator("#sv-max-new input[type=number]")
    box.fill("16")
    box.press("Enter")
    page.locator("#sv-run-btn").click()
    page.wait_for_selector("#sv-summary >> text=Done", timeout=300_000)
    names = "() => (document.querySelector('#sv-race .js-plotly-plot').data || []).map(t => t.name)"
    page.wait_for_function(f"() => ({names})().includes('plain decoding step')", timeout=30_000)
    assert {"verify pass (target)", "finish"} <= set(page.evaluate(names))
    first, last = page.locator("#sv-race-from input"), page.locator("#sv-race-to input")
    first.fill("2")
    first.press("Enter")
    last.fill("3")
    last.press("Enter")
    page.wait_for_function("() => document.querySelectorAll('#sv-tokens .sv-stretch').length === 2", timeout=30_000)
    marked = page.evaluate("[...document.querySelectorAll('#sv-tokens .sv-stretch')].map(s => s.dataset.round)")
    assert marked == ["1", "2"]  # passes 2 and 3 are rounds 1 and 2
    # A token reached from the keyboard opens the inspector with Enter.
    token = page.locator("#sv-tokens [data-r]").first
    assert token.get_attribute("tabindex") == "0" and token.get_attribute("role") == "button"
    token.focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("#sv-inspector >> text=Verify pass 1", timeout=30_000)


def test_a_trace_link_opens_that_bundled_trace_at_that_pass_and_beat(fresh):
    """``?trace=NAME&pass=2&beat=3`` opens the Watch tab on that bundled trace, at pass 2, beat 3
    (1-based, as the stage counts), with that beat's sentence (the trace's own numbers) on the stage."""
    from specviz.figures.trace import load_trace_file
    from specviz.ui.teach.beats import beats

    path = os.path.join(os.path.dirname(__file__), "..", "specviz", "data", "traces", "poem_int8.json")
    rounds, _ = load_trace_file(path)
    expected = beats(rounds[1])[2].sentence
    page = fresh("?trace=poem_int8&pass=2&beat=3")
    page.wait_for_function(_HAS_TEXT, arg=["#sv-watch-stage .sv-watch-progress", "pass 2 of"], timeout=60_000)
    assert page.get_by_role("tab", name="Watch a pass").get_attribute("aria-selected") == "true"
    assert "beat 3 of" in page.inner_text("#sv-watch-stage .sv-watch-progress")
    assert page.locator("#sv-watch-beat input[type=number]").input_value() == "3"
    page.wait_for_function(_HAS_TEXT, arg=["#sv-watch-stage .sv-watch-sentence", expected[:40]], timeout=30_000)
