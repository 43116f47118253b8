"""A page that is honest about what it shows, in a real browser (headless Debian
Chromium, see tests/test_browser.py): a long run stays on one screen, Stop says it stopped, the
inspector never shows a token that is not on screen, a lesson's note stays with its runs' figures, and
the lossless check's result clears when its settings change."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from test_browser import CHROMIUM, app_url, page, set_number as _set_number, run_to_done as _run  # noqa: F401  (fixtures: the app started once, a Chromium page)

from specviz.ui.tabs.replay import INSPECTOR_HINT

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

HINT = INSPECTOR_HINT[:40]


def _box(page, selector: str) -> dict:
    return page.locator(selector).first.bounding_box()


def test_a_256_token_run_stays_in_a_fixed_box_with_the_charts_in_view(page):
    page.locator("#sv-prompt textarea").fill("Write a long story about a lighthouse keeper and the sea.")
    _set_number(page, "sv-max-new", 256)
    _run(page, timeout_s=600)
    box = _box(page, "#sv-tokens")
    assert 300 <= box["height"] <= 420, box
    tokens = page.locator("#sv-tokens .sv-out .sv-tok").count()
    assert tokens > 100, tokens
    chart = _box(page, "#sv-alpha")
    assert 0 < chart["y"] - box["y"] < 1000, (box, chart)
    # The box followed the stream: its newest tokens are in view.
    gap = page.evaluate("() => { const b = document.querySelector('#sv-tokens');"
                        " return b.scrollHeight - b.scrollTop - b.clientHeight; }")
    assert gap < 60, gap


def test_the_inspector_starts_over_on_a_replayed_pass_and_a_new_run(page):
    """After the long run: open the last pass in the inspector, step the replay back one pass (the
    inspector starts over), then run again (it starts over again)."""
    last = page.locator("#sv-tokens .sv-out .sv-tok").last
    last.click()
    inspector = page.locator("#sv-inspector")
    inspector.locator("text=pass").first.wait_for(timeout=30_000)
    assert HINT not in inspector.inner_text()
    page.locator("summary, button, span", has_text="Replay, export and saved traces").first.click()
    page.get_by_role("button", name="◀ pass").click()
    page.wait_for_selector("#sv-summary >> text=Replay", timeout=30_000)
    page.wait_for_function("(hint) => document.querySelector('#sv-inspector').innerText.includes(hint)",
                           arg=HINT, timeout=30_000)
    page.locator("#sv-tokens .sv-out .sv-tok").first.click()
    page.wait_for_function("(hint) => !document.querySelector('#sv-inspector').innerText.includes(hint)",
                           arg=HINT, timeout=30_000)
    _set_number(page, "sv-max-new", 8)
    _run(page)
    assert HINT in page.inner_text("#sv-inspector")


def test_stop_says_stopped_by_you_with_the_tokens_so_far(page, tmp_path_factory):
    _set_number(page, "sv-max-new", 150)
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_selector("#sv-summary >> text=Generating", timeout=180_000)
    page.wait_for_function("document.querySelectorAll('#sv-tokens .sv-out .sv-tok').length > 12", timeout=180_000)
    page.get_by_role("button", name="Stop", exact=True).click()
    page.wait_for_selector("#sv-summary >> text=Stopped", timeout=30_000)
    time.sleep(2.0)  # nothing from the cancelled run overwrites it
    summary = page.inner_text("#sv-summary")
    match = re.search(r"Stopped by you at (\d+)/150 tokens", summary)
    assert match and "Generating" not in summary, summary
    shown = page.locator("#sv-tokens .sv-out .sv-tok").count()
    assert 0 < int(match.group(1)) <= shown < 150, (match.group(1), shown)
    logs = sorted(Path(tmp_path_factory.getbasetemp()).glob("app*/app.log"))
    assert any("run stopped by the visitor" in log.read_text() for log in logs)


def test_a_lesson_note_fills_in_each_run_and_stays_until_another_lesson(page):
    """A lesson's note stays through its runs and a prompt edit, filled in with each finished run's
    figures (it hid on the second run, when the lesson asked for the comparison); picking
    a lesson clears the previous run's tokens."""
    note = page.locator("#sv-lesson-note")
    page.get_by_role("tab", name="Lessons").click()
    page.get_by_role("button", name="Copy-heavy vs free text (prompt lookup)").click()
    note.wait_for(state="visible", timeout=30_000)
    page.wait_for_function("document.querySelectorAll('#sv-tokens .sv-out .sv-tok').length === 0", timeout=30_000)
    _set_number(page, "sv-max-new", 8)
    _run(page)
    page.wait_for_selector("#sv-lesson-note >> text=On your run", timeout=30_000)
    assert "Copy-heavy:" in note.inner_text() and "8 tokens in" in note.inner_text()
    page.locator("#sv-prompt textarea").press_sequentially(" Please.")
    _run(page)
    assert note.is_visible()
    page.get_by_role("tab", name="Lessons").click()
    page.get_by_role("button", name="A misaligned draft (early exit)").click()
    page.wait_for_selector("#sv-lesson-note >> text=almost never guess", timeout=30_000)
    page.wait_for_function("document.querySelectorAll('#sv-tokens .sv-out .sv-tok').length === 0", timeout=30_000)
    assert "On your run" not in note.inner_text()


def test_the_lossless_result_clears_when_its_settings_change(page):
    page.get_by_role("tab", name="Lessons").click()
    page.get_by_role("button", name="Lossless check at T = 1").click()
    # The lesson's note (which names "Is it lossless?" too) shows once the Run tab is back.
    page.locator("#sv-lesson-note").wait_for(state="visible", timeout=60_000)
    page.locator("#sv-lossless-panel").get_by_role("button", name="Is it lossless?").click()
    page.locator("#sv-check-draws input[type=number]").wait_for(state="visible", timeout=60_000)
    _set_number(page, "sv-check-draws", 500)
    page.get_by_role("button", name="Run the check").click()
    page.wait_for_selector("#sv-lossless-text >> text=draws each", timeout=300_000)
    assert page.locator("#sv-lossless .js-plotly-plot").count() == 1
    # The draft's distribution is drawn too, and no component label covers the chart's title.
    assert "p_draft" in page.inner_text("#sv-lossless")
    assert page.locator("#sv-lossless [data-testid='block-label']:visible").count() == 0
    page.locator("#sv-prompt textarea").fill("Name three colours.")
    page.wait_for_selector("#sv-lossless-text >> text=Settings changed: run the check again.", timeout=30_000)
    assert "draws each" not in page.inner_text("#sv-lossless-text")
    assert page.locator("#sv-lossless .js-plotly-plot").count() == 0


def test_table_headers_break_between_words(page):
    page.get_by_role("tab", name="Experiments").click()
    header = page.locator("#sv-exp-table th").first
    header.wait_for(timeout=30_000)
    styles = page.evaluate("""() => [...document.querySelectorAll('#sv-exp-table th, #sv-exp-table th *')]
        .map(e => getComputedStyle(e)).map(s => s.wordBreak + '/' + s.overflowWrap)""")
    assert styles and set(styles) == {"normal/normal"}, set(styles)
