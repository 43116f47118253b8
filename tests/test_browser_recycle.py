"""Token Recycling on the page, in a real browser (headless Debian Chromium, see tests/test_browser.py):
picked from the drafter menu with its note, it drafts trees on free text, and the inspector draws
a recycled tree."""

from __future__ import annotations

import os
import re

import pytest
from test_browser import CHROMIUM, app_url, page, set_number as _set_number, run_to_done as _run  # noqa: F401  (fixtures: the app started once, a Chromium page)

from specviz.drafters import DRAFTER_KINDS

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

RECYCLE = DRAFTER_KINDS["recycle"]


def test_a_recycled_tree_run_shows_its_tree_in_the_inspector(page):
    """Token Recycling from the menu, B = 2, a poem at T = 0, run twice (the second run drafts from
    the table the first filled); then an accepted recycled token opens its pass as a tree."""
    page.get_by_label("Drafter", exact=True).click()
    page.get_by_role("option", name=RECYCLE.label).click()
    page.get_by_text(RECYCLE.note[:40]).wait_for(timeout=30_000)  # the menu's note follows the choice
    page.locator("#sv-prompt textarea").fill("Write a short poem about a lighthouse keeper.")
    _set_number(page, "sv-branches", 2)
    _set_number(page, "sv-max-new", 40)
    _run(page)
    _run(page)
    summary = page.inner_text("#sv-summary")
    assert re.search(r"draft shape\s+a tree", summary), summary
    accepted = page.locator("#sv-tokens .sv-out .sv-accepted")
    assert accepted.count() > 0, "no recycled draft token was accepted"
    accepted.first.click()
    tree = page.locator("#sv-inspector-tree")
    tree.locator("text=as a tree").wait_for(timeout=30_000)
    match = re.search(r"\((\d+) drafted nodes, (\d+) accepted\)", tree.inner_text())
    assert match and int(match.group(2)) >= 1 and int(match.group(1)) > int(match.group(2)), tree.inner_text()
    assert tree.locator(".sv-accepted").count() >= 1 and tree.locator("li").count() >= int(match.group(1)) + 1
