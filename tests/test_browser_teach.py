"""The teaching tabs in a real browser (headless Debian Chromium, see tests/test_browser.py): the
playground's figures follow its sliders to the closed form's values, and a 3-point temperature
sweep on the offline model runs to completion."""

from __future__ import annotations

import os
import re

import pytest
from test_browser import CHROMIUM, app_url, page  # noqa: F401  (fixtures: the app started once, a Chromium page)

from specviz.ui.teach import playground

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]


def _set_slider(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def test_playground_sliders_move_the_figures_to_the_closed_form(page):
    page.get_by_role("tab", name="Playground").click()
    figures = page.locator("#sv-pg-figures")
    first = playground.closed_form(0.7, 4, 0.05, 1.0)
    # The figures are drawn by the page's load (a progress timer shows until then): wait for them.
    page.wait_for_function("([sel, want]) => document.querySelector(sel).innerText.includes(want)",
                           arg=["#sv-pg-figures", f"{first.tokens_per_pass:.3f}"], timeout=30_000)
    page.locator("#sv-pg-show").click()  # the best K shows once guessed or asked for
    for elem_id, value in (("sv-pg-alpha", 0.9), ("sv-pg-k", 6), ("sv-pg-c", 0.1), ("sv-pg-v", 1.2)):
        _set_slider(page, elem_id, value)
    cf = playground.closed_form(0.9, 6, 0.1, 1.2)
    page.wait_for_function(
        "([sel, want]) => document.querySelector(sel).innerText.includes(want)",
        arg=["#sv-pg-figures", "Best K for α = 0.90, c = 0.100, v = 1.200"], timeout=30_000)
    text = figures.inner_text()
    assert f"E[N] = {cf.tokens_per_pass:.3f}" in text, text
    assert f"S = {cf.speedup:.3f}×" in text, text
    assert f"K = {cf.best_k}, speedup {cf.best_speedup:.3f}×" in text, text
    # The Monte-Carlo table sits beside it with the same closed-form numbers, and the map is drawn.
    page.wait_for_function("([sel, want]) => document.querySelector(sel).innerText.includes(want)",
                           arg=["#sv-pg-mc-text", f"{cf.tokens_per_pass:.3f}"], timeout=30_000)
    assert page.locator("#sv-pg-map .js-plotly-plot").count() == 1
    assert page.locator("#sv-pg-mc .js-plotly-plot").count() == 1


def test_a_three_point_temperature_sweep_runs_to_completion(page):
    page.get_by_role("tab", name="Experiments").click()
    page.locator("#sv-exp-values textarea, #sv-exp-values input").first.fill("0 0.7 1.5")
    _set_slider(page, "sv-exp-tokens", 8)
    page.locator("#sv-exp-run").click()
    page.wait_for_selector("#sv-exp-status >> text=Done", timeout=300_000)
    status = page.inner_text("#sv-exp-status")
    assert "3 settings of temperature" in status, status
    table = page.inner_text("#sv-exp-table")
    for setting in ("0.0", "0.7", "1.5"):
        assert re.search(rf"(^|\s){re.escape(setting)}(\s|$)", table), table
    for metric in ("alpha", "tokens_per_pass", "speedup"):
        assert page.locator(f"#sv-exp-{metric} .js-plotly-plot").count() == 1
    assert page.locator("#sv-exp-csv a").count() >= 1  # the CSV download link


def test_a_lesson_sets_up_the_run_tab_and_the_maths_is_rendered(page):
    page.get_by_role("tab", name="The maths").click()
    page.wait_for_selector("#sv-maths .katex", timeout=30_000)  # the formulas are typeset, not raw LaTeX
    assert "Leviathan" in page.inner_text("#sv-maths") and "$$" not in page.inner_text("#sv-maths")
    page.get_by_role("tab", name="Lessons").click()
    page.get_by_role("button", name="A misaligned draft (early exit)").click()
    page.wait_for_selector("#sv-lesson-note >> text=almost never guess", timeout=30_000)
    assert page.get_by_role("tab", name="Run").get_attribute("aria-selected") == "true"
    assert "Write a short poem" in page.locator("#sv-prompt textarea").input_value()
