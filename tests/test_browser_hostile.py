"""Hostile strings through every surface of the real page, in headless Debian Chromium
(see tests/test_browser.py), in one page load: a classroom link whose values are markup, a stored
tour place that is markup, a saved trace whose target, drafter and token texts are markup
(tests/test_text_stays_text.py's :func:`hostile_trace`), a trace whose bad field quotes markup, and
a model name that is markup. On each surface (the link note, the tour, the status line and its
notes, the token panel, the inspector with its tree and chart, the error pop-ups, Watch a pass's
stage, beats, checkboxes, score, losslessness text and charts) no element, link or style comes
from those strings and the visible text is the string itself."""

from __future__ import annotations

import json
import os
from urllib.parse import urlencode

import pytest
from test_browser import CHROMIUM, LAUNCH_ARGS, app_url, wait_until_live  # noqa: F401  (fixture: the app started once)
from test_text_stays_text import BAD_VALUE, HOSTILE, LABEL, hostile_trace

from specviz.figures.trace import token_label, visible_text
from specviz.ui.draw.run_views import NO_TRACE_BASELINE
from specviz.ui.tabs.watch_tab import LAST_RUN

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

LINK = {"lesson": "[Sign in again](https://evil.invalid/login)", "tab": "<img src=x id=pwn-tab>",
        "alpha": "<b>b</b>", "k": "**9**", "c": "$$x^2$$", "trace": "<svg/onload=window.pwn=1>", "pass": "`2`"}
TOUR = {"open": True, "step": "<img src=x id=pwn-tour>"}
MODEL = "<img src=x id=pwn-model>[model](https://evil.invalid)"

#: Anything the hostile strings could have made: their elements, links, styles and scripts, and
#: formulas or Markdown emphasis and code inside the surfaces.
LEAKS = """([selectors, made]) => {
  const found = [];
  const all = (sel, root) => [...(root || document).querySelectorAll(sel)];
  for (const el of all('[id^="pwn"], img[src="x"], a[href*="evil"], svg[onload], [onerror]')) found.push(el.outerHTML);
  for (const el of all('style, script')) if (/pwn/.test(el.textContent)) found.push(el.outerHTML.slice(0, 80));
  for (const sel of selectors) for (const root of all(sel)) {
    for (const el of all('.katex, img, iframe', root)) found.push(el.outerHTML.slice(0, 120));
    for (const el of all('a, b, i, em, strong, del, code', root))
      if (made.includes(el.textContent.trim())) found.push(el.outerHTML.slice(0, 120));
  }
  if (window.pwn !== undefined) found.push('window.pwn');
  return found;
}"""
#: The texts Markdown or HTML would have made elements of, from the hostile strings.
MADE = ["bold", "u", "s", "code", "c", "b", "Sign-in", "Sign in", "Sign in again", "a", "x^2", "x", "drafter", "model",
        "e", "l", "i", "9", "2"]
#: The visible text of a surface: an element's rendered text, a chart's SVG text.
TEXT = "(sel) => [...document.querySelectorAll(sel)].map((el) => el.innerText + ' ' + el.textContent).join(' ')"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _text(page, selector: str) -> str:
    return _flat(page.evaluate(TEXT, selector))


def _wait_text(page, selector: str, want: str, timeout: float = 30) -> None:
    page.wait_for_function("([sel, want]) => [...document.querySelectorAll(sel)].some((el) => "
                           "(el.innerText + ' ' + el.textContent).replace(/\\s+/g, ' ').includes(want))",
                           arg=[selector, _flat(want)], timeout=timeout * 1000)


def _no_leaks(page, *surfaces: str) -> None:
    leaks = page.evaluate(LEAKS, [list(surfaces), MADE])
    assert not leaks, leaks


def _shows(page, selector: str, texts) -> None:
    shown = _text(page, selector)
    for text in texts:
        assert _flat(text) in shown, (selector, text, shown[:600])


def _toast(page, want: str) -> None:
    _wait_text(page, "[data-testid=toast-body]", want)
    _no_leaks(page, "[data-testid=toast-body]")
    for close in page.locator("[data-testid=toast-close]").all():
        close.click()


@pytest.fixture(scope="module")
def page(app_url, tmp_path_factory):  # noqa: F811
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1600})
        context.add_init_script(f"sessionStorage.setItem('sv-tour', {json.dumps(json.dumps(TOUR))});")
        page = context.new_page()
        page.goto(f"{app_url}/?{urlencode(LINK)}", wait_until="domcontentloaded")
        page.wait_for_selector("#sv-tour-btn", timeout=60_000)
        wait_until_live(page)
        yield page
        browser.close()


def test_every_surface_shows_hostile_strings_as_text(page, tmp_path):
    # The link note: every bad value refused by its parameter's name, none echoed.
    _wait_text(page, "#sv-link-note", "lesson is not a lesson here")
    note = _text(page, "#sv-link-note")
    assert all(f"{name} is not" in note for name in ("tab", "alpha", "k", "c", "lesson", "trace")), note
    assert not any(_flat(value) in note for value in LINK.values()), note
    # The tour: a stored place that is not a step number opens at its first step.
    _wait_text(page, "#sv-tour", "Welcome")
    _no_leaks(page, "#sv-link-note", "#sv-tour")
    page.keyboard.press("Escape")

    # A saved trace with markup in its fields and its tokens: the status line, the token panel.
    trace, bad = tmp_path / "hostile.json", tmp_path / "bad.json"
    trace.write_text(json.dumps(hostile_trace()), encoding="utf-8")
    broken = hostile_trace()
    broken["rounds"][0]["emitted"][0]["kind"] = BAD_VALUE
    bad.write_text(json.dumps(broken), encoding="utf-8")
    page.locator("summary, button, span", has_text="Replay, export and saved traces").first.click()
    page.set_input_files("#sv-load input[type=file]", str(trace))
    _wait_text(page, "#sv-summary", "Loaded a saved trace")
    _shows(page, "#sv-summary", [LABEL, "<b>drafter</b>", NO_TRACE_BASELINE])
    emitted = {e["text"] for r in hostile_trace()["rounds"] for e in r["emitted"]} & set(HOSTILE)
    _shows(page, "#sv-tokens .sv-out", emitted)
    _no_leaks(page, "#sv-summary", "#sv-tokens")

    # The inspector on pass 2's resampled token: its story, its tree and its chart.
    page.locator('#sv-tokens .sv-out [data-r="1"][data-i="1"]:not([data-rej])').click()
    _wait_text(page, "#sv-inspector", "Verify pass 2")
    rejected, resampled = HOSTILE[1], HOSTILE[4]
    _shows(page, "#sv-inspector", [token_label(rejected, 6243), token_label(resampled, 16862)])
    _shows(page, "#sv-inspector-tree", [visible_text(t) for t in HOSTILE[:3]])
    _wait_text(page, "#sv-inspector-plot", rejected)
    _no_leaks(page, "#sv-inspector", "#sv-inspector-tree", "#sv-inspector-plot")

    # Errors: a bad field's value, and a model's name, quoted in the pop-up.
    page.locator("#sv-load button[aria-label*=Clear], #sv-load button[aria-label*=clear]").first.click()
    page.set_input_files("#sv-load input[type=file]", str(bad))
    _toast(page, repr(BAD_VALUE))
    page.get_by_label("Target model").fill(MODEL)
    page.locator("#sv-run-btn").click()
    _toast(page, MODEL)

    # Watch a pass on the loaded trace: stage, checkboxes, chart, beats, score, losslessness.
    page.get_by_role("tab", name="Watch a pass").click()
    page.locator("#sv-watch-source input").click()
    page.get_by_role("option", name=LAST_RUN).click()
    _wait_text(page, "#sv-watch-stage .sv-watch-progress", LABEL)
    _shows(page, "#sv-watch-stage", [visible_text(HOSTILE[0])])
    _shows(page, "#sv-watch-picks", [f"1. {HOSTILE[0]}", f"2. {HOSTILE[1]}"])
    _wait_text(page, "#sv-watch-plot", f"2. {HOSTILE[1]}")
    sentence = "() => document.querySelector('#sv-watch-stage .sv-watch-sentence').textContent"
    sentences = [page.evaluate(sentence)]
    page.locator("#sv-watch-picks label").first.click()
    page.locator("#sv-watch-lock").click()  # scores the guess and jumps to the first test
    _wait_text(page, "#sv-watch-score", f"“{HOSTILE[1]}”: you said reject")
    _shows(page, "#sv-watch-score", [f"“{HOSTILE[0]}”: you said accept"])
    page.wait_for_function(f"(old) => ({sentence})() !== old", arg=sentences[-1], timeout=15_000)
    for _ in range(2):  # the second test, then the resample
        sentences.append(page.evaluate(sentence))
        page.locator("#sv-watch-next").click()
        page.wait_for_function(f"(old) => ({sentence})() !== old", arg=sentences[-1], timeout=15_000)
    sentences.append(page.evaluate(sentence))
    assert [s.split(",")[0] for s in sentences[1:3]] == ["Position 1", "Position 2"], sentences
    assert f"“{HOSTILE[0]}”" in sentences[0] and f"“{HOSTILE[0]}”" in sentences[1], sentences
    assert f"“{HOSTILE[1]}”" in sentences[2] and f"draws “{HOSTILE[4]}”" in sentences[3], sentences
    page.locator("button, span", has_text="Losslessness at this position").first.click()
    _wait_text(page, "#sv-watch-stack-text", "Position of")
    _wait_text(page, "#sv-watch-stack", "accepted mass + residual mass")
    _no_leaks(page, "#sv-watch-stage", "#sv-watch-picks", "#sv-watch-plot", "#sv-watch-score",
              "#sv-watch-stack-text", "#sv-watch-stack", "#sv-summary", "#sv-tokens", "#sv-link-note")
