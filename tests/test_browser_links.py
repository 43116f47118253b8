"""The classroom items in a real browser (headless Debian Chromium, see tests/test_browser.py):
a ``?lesson=`` link followed by Watch a pass → Load works (item 6), a Playground link's map and
Monte-Carlo table use the linked c (item 7), and public mode's one-generation refusal appears as
a message on the tab where Run was pressed (item 8)."""

from __future__ import annotations

import os

import pytest
from test_browser import CHROMIUM, app_url, browser, wait_until_live  # noqa: F401  (fixtures: the app started once, one Chromium)
from test_browser import HAS_TEXT as _HAS_TEXT

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]


def _open(browser, url: str):  # noqa: F811  (the fixture, passed on)
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url, wait_until="domcontentloaded", timeout=180_000)
    page.wait_for_selector("#sv-tour-btn", timeout=180_000)
    wait_until_live(page)
    return page, errors


def test_a_lesson_link_then_watch_a_pass_load_works(browser, app_url):  # noqa: F811
    page, _ = _open(browser, app_url + "/?lesson=temperature")
    page.wait_for_selector("#sv-lesson-note >> text=Lesson", timeout=30_000)
    page.get_by_role("tab", name="Watch a pass").click()
    source = page.locator("#sv-watch-source input")
    assert source.input_value()  # the trace list kept its value (the failed load emptied it)
    page.evaluate("() => { window.svLoaded = 0; }")
    page.locator("#sv-watch-load").click()
    # Load answers with the trace's first interesting pass at beat 0 and no error pop-up.
    page.wait_for_function(_HAS_TEXT, arg=["#sv-watch-stage .sv-watch-progress", "beat 1 of"], timeout=60_000)
    page.wait_for_timeout(5000)
    assert not page.locator("[data-testid=toast-body]").count(), page.locator("[data-testid=toast-body]").all_inner_texts()
    assert source.input_value()
    page.close()


def test_a_playground_link_sets_the_map_and_the_table_too(browser, app_url):  # noqa: F811
    page, _ = _open(browser, app_url + "/?tab=playground&alpha=0.6&k=5&c=0.2&v=1")
    page.wait_for_function(_HAS_TEXT, arg=["#sv-pg-figures", "1.19×"], timeout=30_000)
    page.wait_for_function(_HAS_TEXT, arg=["#sv-pg-map", "c = 0.200"], timeout=30_000)
    page.wait_for_timeout(3000)  # any later update has landed
    table = page.inner_text("#sv-pg-mc-text")
    assert "1.907" not in table and "1.19" in table, (table, page.inner_text("#sv-pg-map"))
    page.close()


#: A page function's text of an element by selector, '' where there is none (an empty Markdown
#: may not be in the page at all).
TEXT_OF = "((sel) => (document.querySelector(sel) || {innerText: ''}).innerText.trim())"


@pytest.fixture(scope="module")
def public_url(tmp_path_factory, app_launcher):
    """``SPECVIZ_PUBLIC=1 python app.py`` on a free loopback port of its own."""
    with app_launcher(tmp_path_factory.mktemp("public"), SPECVIZ_PUBLIC="1") as url:
        yield url


@pytest.mark.parametrize("tab,button", [("Run", "#sv-run-btn"), ("Experiments", "#sv-exp-run")])
def test_the_public_refusal_is_a_message_on_the_tab_where_run_was_pressed(browser, public_url, tab,  # noqa: F811
                                                                          button):
    page, _ = _open(browser, public_url)
    # A long plain run keeps this visitor's one generation busy while the second press is refused.
    page.locator("#sv-max-new input[type=number]").fill("256")
    page.locator("#sv-max-new input[type=number]").press("Enter")
    page.locator("#sv-run-btn").click()
    # The first run has reached the server (its status or the queue's words are on the page): a
    # fixed two-second wait was too short on a busy machine, and the second press went through.
    page.wait_for_function(f"() => !{TEXT_OF}('#sv-summary').startsWith('Press') || {TEXT_OF}('#sv-run-status')",
                           timeout=60_000)
    page.get_by_role("tab", name=tab).click()
    page.locator(button).click()
    toast = page.locator("[data-testid=toast-body]").filter(has_text="One generation at a time")
    toast.first.wait_for(timeout=30_000)
    assert toast.first.is_visible()
    page.close()
