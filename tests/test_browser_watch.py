"""The "Watch a pass" tab in a real browser (headless Debian Chromium, see tests/test_browser.py):
a bundled trace loads, pass 2 plays beat by beat with the keyboard, each beat saying the trace's own
numbers in order, and a guess made before the reveal is scored against the real probabilities; the
rule switch replays a recorded pass under each verification rule, and the Run tab's lossless check
(through the page's /lossless API, the call its button makes) passes for the exact rules and fails
for the lossy control."""

from __future__ import annotations

import json
import os

import pytest
from test_browser import CHROMIUM, app_url, page  # noqa: F401  (fixtures: the app started once, a Chromium page)

from specviz.core.rules import RULES
from specviz.figures.trace import trace_from_dict
from specviz.ui.tabs import watch_tab
from specviz.core.rules import RULES
from specviz.ui.teach.beats import beats, fmt, replay_rule, score_guess
from specviz.ui.tabs.watch_tab import BUNDLED, TRACES

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


def _wait_rule_text(page, want: str) -> None:
    try:
        page.wait_for_function("([sel, want]) => document.querySelector(sel)?.innerText.includes(want)",
                               arg=["#sv-watch-rule-text", want], timeout=30_000)
    except Exception as error:  # say what the panel showed instead
        raise AssertionError(f"{want!r} not in {page.inner_text('#sv-watch-rule-text')[:300]!r}") from error


def _show_replay(page, shown: bool) -> None:
    """Open (or close) the accordion "The same pass under another rule"."""
    if page.locator("#sv-watch-rule").is_visible() != shown:
        page.get_by_role("button", name="The same pass under another rule").click()
    page.locator("#sv-watch-rule").wait_for(state="visible" if shown else "hidden", timeout=15_000)


def _wait_stage(page, want: str) -> None:
    page.wait_for_function("(want) => document.querySelector('#sv-watch-stage')?.innerText.includes(want)",
                           arg=want, timeout=30_000)


def test_the_rule_switch_changes_the_accepted_count_of_a_recorded_pass(page, app_url):
    """poem_int8's pass 13, replayed with its recorded u: the full rule keeps 2 of 4 drafts (as the
    run did), one-hot 0 (its argmax is not the drawn draft and p_target of it is small), block
    verification 4 (its last test passes, which keeps the whole block).

    The replay sits in a closed accordion; whichever way the page moves to another pass (a typed
    pass number, the beat button past a pass's end, Load, the trace menu, a ``?trace=`` link), the
    replay shows that pass when the accordion opens. It used to be computed by an event chained
    after the pass's own (``.then``) that read the pass slider again; this test chose the trace
    already on screen (whose name was there before its load ran: the menu fires the load twice)
    and typed 13 at once, so a load could land after the typing and move the slider back to the
    trace's first pass: the stage showed pass 13 and both chained replays pass 2. Choosing another
    trace first makes the wait for the trace's name a wait for its load."""
    rounds = _rounds("poem_int8")
    page.get_by_role("tab", name="Watch a pass").click()
    _choose(page, BUNDLED["early_exit_rejection"])
    _choose(page, BUNDLED["poem_int8"])  # its name on the stage: its load has landed
    box = page.locator("#sv-watch-pass input[type=number]")
    box.fill("13")
    box.press("Enter")
    box.blur()  # the slider's number box commits its value when it loses focus
    _wait_stage(page, "pass 13 of")
    _wait_sentence(page, beats(rounds[12])[0].sentence)
    _show_replay(page, True)
    _wait_rule_text(page, "Pass 13 under full")
    kept = {rule: replay_rule(rounds[12], rule).accepted[0] for rule in ("full", "one-hot", "block")}
    assert kept == {"full": 2, "one-hot": 0, "block": 4}
    for rule in ("one-hot", "block", "full"):
        page.locator("#sv-watch-rule").get_by_label(RULES[rule].label, exact=True).check()
        want = f"{rule} keeps {kept[rule]} of 4 drafts"
        _wait_rule_text(page, want)
        assert "the recording kept 2" in page.inner_text("#sv-watch-rule-text")
        assert page.locator("#sv-watch-rule-plot .js-plotly-plot").count() == 1
    page.locator("#sv-watch-rule").get_by_label("relaxed-top-k (LOSSY control)", exact=True).check()
    _wait_rule_text(page, "the Run tab's lossless check fails for it")
    page.locator("#sv-watch-rule").get_by_label("one-hot (exact, argmax draft)", exact=True).check()
    _wait_rule_text(page, "Pass 13 under one-hot")

    # Other ways to another pass, with the replay closed: it shows that pass, under the chosen rule, once opened.
    _show_replay(page, False)
    n = len(beats(rounds[12]))
    for beat in range(2, n + 2):  # the beat button, one beat at a time (each reads the last), past the last
        page.locator("#sv-watch-next").click()
        _wait_stage(page, f"pass 13 of 19 · beat {beat} of {n}" if beat <= n else "pass 14 of 19 · beat 1 of")
    _show_replay(page, True)
    _wait_rule_text(page, "Pass 14 under one-hot")
    _show_replay(page, False)
    page.locator("#sv-watch-load").click()  # Load: the trace's first pass worth watching
    _wait_stage(page, "pass 2 of 19 · beat 1 of")
    _show_replay(page, True)
    _wait_rule_text(page, "Pass 2 under one-hot")
    _show_replay(page, False)
    _choose(page, BUNDLED["early_exit_rejection"])  # the trace menu
    first = watch_tab._first_pass(watch_tab.bundled("early_exit_rejection")) + 1
    _wait_stage(page, f"pass {first} of")
    _show_replay(page, True)
    _wait_rule_text(page, f"Pass {first} under one-hot")

    # A link opens its pass with the replay on the full rule, in a page whose accordion was never opened.
    page.goto(app_url + "/?trace=poem_int8&pass=7&beat=1", wait_until="domcontentloaded")
    _wait_stage(page, "pass 7 of 19 · beat 1 of")
    _show_replay(page, True)
    _wait_rule_text(page, "Pass 7 under full")


def test_the_lossless_check_passes_for_the_exact_rules_and_fails_for_the_lossy_control(app_url):
    """The Run tab's "Is it lossless?" check, called as its button calls it (the /lossless endpoint of
    the same server; five checks in a browser would cost five page round trips for nothing more),
    2000 first tokens each at T = 1 with the int8 self-draft, seed 0. Exact rules: the chi-square
    p-value of the speculative draws against p_target is above 0.01 (at a fixed seed, the result is
    reproducible; 0.197 to 0.753 on this machine). Relaxed top-5 keeps a draft in the target's top
    5 at any ratio, moving the tail's mass into the top 5: its p-value is below 0.001."""
    gradio_client = pytest.importorskip("gradio_client")
    client = gradio_client.Client(app_url, verbose=False)
    args = {"prompt": "The history of the printing press begins", "target_id": "smollm2-135m-instruct",
            "drafter_kind": "int8", "draft_model": "", "early_exit_layers": 4, "k": 4, "temperature": 1.0, "top_k": 0,
            "top_p": 1.0, "seed": 0, "chat": False, "device": "cpu", "dtype": "float32", "n_draws": 2000,
            "control": False}
    p_values = {}
    for rule in RULES:
        _, text = client.predict(**args, rule=rule, api_name="/lossless")
        assert f"verification rule **{rule}**" in text
        row = next(line for line in text.splitlines() if line.startswith("| speculative sampling |"))
        p_values[rule] = float(row.strip("| ").split("|")[-1])
    assert all(p_values[rule] > 0.01 for rule in RULES if RULES[rule].lossless), p_values
    assert p_values["relaxed-top-k"] < 0.001, p_values
