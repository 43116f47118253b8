"""A page that answers while it streams, in a real browser (headless
Debian Chromium, see tests/test_browser.py): while the default page streams 256 tokens, no task on
the browser's main thread runs over 200 ms (a PerformanceObserver of long tasks), and a click on a
token mid-run opens the inspector within 1 s, inside the viewport.

Slow: a 256-token run with its baseline takes a minute or more, and on a machine whose cores are
busy with other programs the browser itself is starved (at a load average of 12-16 on 2 cores the
browser's own tasks ran past 200 ms whatever the page sent), so the thresholds, which are the
issue's goals, hold only on a machine that is not otherwise busy. The default suite's cheaper check
of the same bound is tests/test_stream.py (at most one chart redraw per streamed update)."""

from __future__ import annotations

import os
import time

import pytest
from test_browser import CHROMIUM, app_url, page, set_number as _set_number  # noqa: F401  (fixtures: the app started once, a Chromium page)

from specviz.ui.tabs.replay import INSPECTOR_HINT

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

#: Installed before Run: every long task (over 50 ms, the browser's own definition) from then on.
LONG_TASKS_JS = """() => {
  window.__svLong = [];
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) window.__svLong.push(entry.duration);
  }).observe({type: 'longtask', buffered: false});
  return true;
}"""


def test_a_256_token_stream_keeps_the_page_answering_and_the_inspector_in_view(page):
    page.set_viewport_size({"width": 1400, "height": 900})
    page.locator("#sv-prompt textarea").fill("Write a long story about a lighthouse keeper and the sea.")
    _set_number(page, "sv-max-new", 256)
    page.locator("#sv-run-btn").click()
    page.wait_for_selector("#sv-summary >> text=Generating", timeout=600_000)
    page.evaluate(LONG_TASKS_JS)  # from the first token: the stream, not the model's loading
    page.wait_for_function("document.querySelectorAll('#sv-tokens .sv-out .sv-tok').length >= 40",
                           timeout=600_000, polling=100)
    token = page.locator("#sv-tokens .sv-out .sv-tok").nth(10)
    token.scroll_into_view_if_needed()
    box = token.bounding_box()
    clicked = time.perf_counter()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function("(hint) => !document.querySelector('#sv-inspector').innerText.includes(hint)",
                           arg=INSPECTOR_HINT[:40], timeout=60_000, polling=20)
    answered_s = time.perf_counter() - clicked
    page.wait_for_timeout(300)  # the scroll into view runs right after the inspector is filled
    inspector = page.locator("#sv-inspector").bounding_box()
    viewport = page.viewport_size
    summary_then = page.inner_text("#sv-summary")[:200]
    streaming = "Generating" in summary_then
    # Off-screen charts skip their rendering while the run streams (styles.CHART_CSS).
    skipping = page.evaluate("() => document.documentElement.classList.contains('sv-streaming')")
    page.wait_for_selector("#sv-summary >> text=Done", timeout=600_000)
    long_ms = page.evaluate("() => window.__svLong")
    seen = (f"inspector answered {answered_s:.2f} s after the click, inspector box {inspector} in viewport "
            f"{viewport}; {len(long_ms)} long tasks, {sum(long_ms) / 1e3:.1f} s in all, the longest "
            f"{max(long_ms, default=0):.0f} ms")  # every figure in each failure's message
    print(seen)  # shown with -s: the figures of a passing run too
    assert streaming, f"the run ended before the inspector answered: the click was not mid-run ({summary_then!r}); " + seen
    assert answered_s <= 1.0, seen
    assert skipping, "the page did not mark the run as streaming: " + seen
    assert 0 <= inspector["y"] and inspector["y"] + inspector["height"] <= viewport["height"], seen
    assert max(long_ms, default=0) <= 200, seen
