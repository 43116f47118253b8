"""The Run tab's lossless↔lossy dial in a real browser (headless Debian Chromium, see
tests/test_browser.py; the shared app of the browser modules): its lesson sets up the Run tab, a
16-token run records its passes, and "Trace the dial" draws the first token 100 times at each weight
w from 1 to 0 and replays the run's passes, showing α against the distance from p_target with the
exact rules marked. At a fixed seed the verdicts are reproducible: w = 1 passes the lossless check,
w = 0 (the early-exit draft's own output, about 0.7 from p_target) fails it."""

from __future__ import annotations

import os

import pytest
from test_browser import CHROMIUM, app_url, page  # noqa: F401  (fixtures: the app started once, a Chromium page)

from specviz.ui.teach.dial import DIAL_WEIGHTS

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

LESSON = "Trading exactness for speed (the ensemble dial)"


def _table(page) -> dict[float, list[str]]:
    """The dial's rendered table, its rows by w: α, distance, p-value, verdict."""
    cells = page.eval_on_selector_all("#sv-dial-text table tbody tr",
                                      "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))")
    return {float(row[0]): row[1:] for row in cells if len(row) == 5}


def test_the_dial_traces_alpha_against_distance_with_the_exact_rules_marked(page):
    page.get_by_role("tab", name="Lessons").click()
    page.get_by_role("button", name=LESSON).click()
    page.wait_for_selector("#sv-lesson-note >> text=ensemble", timeout=30_000)
    tokens = page.locator("#sv-max-new input[type=number]")  # a short run: its passes are all the view needs
    tokens.fill("16")
    tokens.press("Enter")
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_selector("#sv-summary >> text=Done", timeout=240_000)

    page.locator("#sv-dial-panel").get_by_text("Lossless ↔ lossy: the ensemble dial").click()
    draws = page.locator("#sv-dial-draws input[type=number]")
    draws.fill("100")
    draws.press("Enter")
    page.locator("#sv-dial-btn").click()
    page.wait_for_selector("#sv-dial-text >> text=first-token draws per w", timeout=180_000)
    text = page.inner_text("#sv-dial-text")
    assert "100 first-token draws per w" in text
    rows = _table(page)
    assert sorted(rows) == sorted(DIAL_WEIGHTS)
    alpha = {w: float(cells[0]) for w, cells in rows.items()}
    distance = {w: float(cells[1]) for w, cells in rows.items()}
    assert alpha[0.0] == 1.0 and alpha[1.0] < alpha[0.0]  # w = 0 keeps every draft
    assert distance[0.0] > distance[1.0]  # and its output is the draft's, far from p_target
    assert rows[1.0][3] == "passes" and rows[0.0][3] == "fails"  # the lossless check's verdicts
    svg = page.inner_text("#sv-dial-draws-plot")
    for label in ("w=1", "w=0", "full (exact)", "one-hot / exact-match (exact)"):
        assert label in svg, label
    page.wait_for_selector("#sv-dial-passes-text >> text=On the last run's passes", timeout=30_000)
    passes = page.inner_text("#sv-dial-passes-plot")
    assert "w=1" in passes and "full (exact)" in passes and "block (exact)" in passes
