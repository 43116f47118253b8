"""The "Watch a pass" tab in a real browser (headless Debian Chromium, see tests/test_browser.py):
a bundled trace loads, pass 2 plays beat by beat with the keyboard, each beat saying the trace's own
numbers in order, and a guess made before the reveal is scored against the real probabilities."""

from __future__ import annotations

import json
import os

import pytest
from test_browser import CHROMIUM, app_url, page  # noqa: F401  (fixtures: the app started once, a Chromium page)

from specviz.trace import trace_from_dict
from specviz.ui.teach.beats import beats, fmt, score_guess
from specviz.ui.watch_tab import BUNDLED, TRACES

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

SENTENCE = "#sv-watch-stage .sv-watch-sentence"


def _rounds(stem: str):
    return trace_from_dict(json.loads((TRACES / f"{stem}.json").read_text(encoding="utf-8")))[0]


def _choose(page, name: str) -> None:
    page.locator("#sv-watch-source input").click()
    page.get_by_role("option", name=name).click()
    page.wait_for_function("([sel, want]) => document.querySelector(sel)?.innerText.includes(want)",
                           arg=["#sv-watch-stage .sv-watch-progress", name], timeout=30_000)


def _wait_sentence(page, want: str) -> None:
    page.wait_for_function("([sel, want]) => document.querySelector(sel)?.textContent === want",
                           arg=[SENTENCE, want], timeout=15_000)


def test_a_pass_plays_beat_by_beat_with_the_traces_numbers_and_a_guess_is_scored(page):
    page.get_by_role("tab", name="Watch a pass").click()
    _choose(page, BUNDLED["early_exit_rejection"])
    _choose(page, BUNDLED["poem_int8"])  # opens at its pass 2: an accept, then a rejection
    rounds = _rounds("poem_int8")
    expected = beats(rounds[1])
    assert "pass 2 of 19 · beat 1 of" in page.inner_text("#sv-watch-stage .sv-watch-progress")
    _wait_sentence(page, expected[0].sentence)
    page.locator("#sv-watch-stage .sv-watch-context").click()  # focus on the page, not in a field
    seen = [page.text_content(SENTENCE)]
    for k in range(1, len(expected)):
        page.keyboard.press(" " if k == 1 else "ArrowRight")
        _wait_sentence(page, expected[k].sentence)
        seen.append(page.text_content(SENTENCE))
    assert seen == [b.sentence for b in expected]
    # The scrubber counts beats as the stage does: at the last beat both say len(expected).
    assert f"beat {len(expected)} of {len(expected)}" in page.inner_text("#sv-watch-stage .sv-watch-progress")
    assert page.locator("#sv-watch-beat input[type=number]").input_value() == str(len(expected))
    tests = [b for b in expected if b.kind == "test"]
    assert [b.accepted for b in tests] == [True, False]
    for b in tests:  # the recorded u against the recorded acceptance probability
        assert f"u = {fmt(b.uniform)}" in " ".join(seen) and fmt(b.accept_prob) in " ".join(seen)
    assert "This pass emits 2 tokens: 1 accepted + 1 resampled." in seen[-1]
    # The picture's text alternative is the beat's sentence; the chips show the verdicts.
    assert page.get_attribute("#sv-watch-plot", "aria-label") == seen[-1]
    assert page.locator("#sv-watch-stage .sv-chip.sv-w-rejected").count() == 1
    page.keyboard.press("ArrowLeft")
    _wait_sentence(page, expected[-2].sentence)
    page.keyboard.press("ArrowRight")
    _wait_sentence(page, expected[-1].sentence)

    # Past the last beat: the next pass, where the learner guesses before the tests play.
    page.keyboard.press("ArrowRight")
    third = beats(rounds[2])
    _wait_sentence(page, third[0].sentence)
    page.locator("#sv-watch-picks label").first.click()
    page.locator("#sv-watch-count input").fill("3")
    page.locator("#sv-watch-lock").click()
    score = score_guess(rounds[2], {0: True}, 3)
    page.wait_for_function("([sel, want]) => document.querySelector(sel)?.innerText.includes(want)",
                           arg=["#sv-watch-score", f"{score.points:.2f} expected points out of {score.possible}"],
                           timeout=15_000)
    text = page.inner_text("#sv-watch-score")
    assert "Running score" in text and f"{score.points:.2f} of {score.possible} over 1 pass" in text
    first_test = next(b for b in third if b.kind == "test")
    _wait_sentence(page, first_test.sentence)  # the reveal starts at the first test

    # Typing a pass number opens that pass at its first beat.
    box = page.locator("#sv-watch-pass input[type=number]")
    box.fill("5")
    box.press("Enter")
    _wait_sentence(page, beats(rounds[4])[0].sentence)
