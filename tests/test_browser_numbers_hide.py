"""What the numbers hide, in a real browser (headless Debian Chromium, see tests/test_browser.py):
the oracle drafter from the menu says its ceiling in the summary; the "What the numbers hide" panel
draws the run beside its synthetic twin with the health checks and the lessons in the run's numbers;
drafters side by side say each one's gap to the oracle; the three lessons set up the Run tab."""

from __future__ import annotations

import os
import re

import pytest
from test_browser import CHROMIUM, HAS_TEXT, app_url, page, set_number as _set_number, run_to_done as _run  # noqa: F401  (fixtures: the app started once, a Chromium page)

from specviz.drafters import DRAFTER_KINDS

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

ORACLE = DRAFTER_KINDS["oracle"]


def test_an_oracle_run_says_its_ceiling_and_the_panel_draws_its_twin_and_health(page):
    """The oracle at T = 1 (one run, 24 tokens): the summary says what the ceiling is made of and
    what a replayed sample is worth; the panel shows the twin chart, the four checks and the lessons."""
    page.get_by_label("Drafter", exact=True).click()
    page.get_by_role("option", name=ORACLE.label).click()
    page.get_by_text(ORACLE.note[:40]).wait_for(timeout=30_000)
    page.locator("#sv-prompt textarea").fill("Write a short poem about a lighthouse keeper.")
    _set_number(page, "sv-max-new", 24)
    _set_number(page, "sv-temperature", 1)
    _run(page)
    summary = page.inner_text("#sv-summary")
    assert "The oracle replays the target's own output" in summary, summary
    assert re.search(r"K \+ 1 = 5", summary) and "accepted with probability p_target(x)" in summary, summary
    page.locator("#sv-numbers-panel").get_by_role("button", name=re.compile("What the numbers hide")).click()
    page.wait_for_function(HAS_TEXT, arg=["#sv-numbers", "Health checks"], timeout=60_000)
    panel = page.inner_text("#sv-numbers")
    assert "Synthetic twin." in panel and "Lesson: The ceiling" in panel and "Lesson: High α is not health" in panel
    for check in ("loop", "drafts", "counters", "bursts"):
        assert re.search(rf"[✓⚠]\s*{check}:", panel), (check, panel)
    page.locator("#sv-twin .js-plotly-plot").wait_for(timeout=30_000)
    assert "synthetic twin" in page.inner_text("#sv-twin")


def test_side_by_side_says_each_drafters_gap_to_the_oracle(page):
    page.get_by_role("tab", name="Drafters side by side").click()
    chosen = page.locator("#sv-sbs-drafters")
    for box in chosen.locator("input[type=checkbox]").all():
        if box.is_checked():
            box.uncheck()
    chosen.get_by_label("Prompt lookup", exact=True).check()
    chosen.get_by_label(ORACLE.lane, exact=True).check()
    _set_number(page, "sv-sbs-tokens", 12)
    page.get_by_role("button", name="Run side by side").click()
    page.wait_for_selector("#sv-sbs-status >> text=Done", timeout=300_000)
    out = page.inner_text("#sv-sbs-out")
    assert re.search(r"tokens per pass[^\n]*below the oracle", out), out
    page.get_by_role("tab", name="Run").click()


@pytest.mark.parametrize("lesson,drafter", [("The ceiling (the oracle drafter)", "oracle"),
                                            ("What a constant α hides (the synthetic twin)", "ngram"),
                                            ("High α is not health (a greedy loop)", "ngram")])
def test_each_numbers_lesson_sets_up_the_run_tab(page, lesson, drafter):
    page.get_by_role("tab", name="Lessons").click()
    page.get_by_role("button", name=lesson).click()
    note = page.locator("#sv-lesson-note")
    note.wait_for(state="visible", timeout=30_000)
    assert "What the numbers hide" in note.inner_text()
    assert page.get_by_label("Drafter", exact=True).input_value() == DRAFTER_KINDS[drafter].label
