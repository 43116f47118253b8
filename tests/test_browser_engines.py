"""An engine's numbers on the real page, in headless Debian Chromium (see
tests/test_browser.py), on the one app the browser modules share: one file per engine dropped on
"Your engine's numbers" is drawn with the Run tab's charts and its text coloured as far as the
engine tells (the rest marked unknown); a foreign file gets the importer's one sentence; and the Run
tab's "What an engine would have logged" switch greys out what no engine logs on a loaded trace."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from test_browser import CHROMIUM, HAS_TEXT, app_url, browser, wait_until_live  # noqa: F401  (fixtures: the app, one Chromium)

from specviz.engine_logs import ENGINES, read_engine_file
from specviz.ui.draw.engine_views import ENGINE_NAMES

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "engines"
#: One file per engine, each from the engine's own tests (tests/fixtures/engines/README.md): vLLM's
#: stream with per-step tokens (made a stopped response below, whose last token the engine cannot
#: place), SGLang's meta_info with its histogram, llama.cpp's per-request log line, mlx-lm's
#: from_draft stream.
ONE_FILE = {"vllm": "vllm_stream.sse", "sglang": "sglang_generate.json", "llamacpp": "llamacpp_server.log",
            "mlx": "mlx_lm_stream.jsonl"}
#: A saved run with rejected drafts, resampled and bonus tokens (specviz/data/traces/README.md).
TRACE = ROOT / "specviz" / "data" / "traces" / "copy_lookup.json"
CHARTS = ("#sv-engine-tpp", "#sv-engine-lengths", "#sv-engine-positions", "#sv-engine-closed")
#: How many Plotly traces each chart of the tab draws (the browser's own record of the figure).
TRACES = "(sel) => (document.querySelector(sel + ' .js-plotly-plot') || {}).data?.length || 0"
#: True once every chart of ``sels`` draws at least one trace.
ALL_DRAWN = f"(sels) => sels.every((sel) => ({TRACES})(sel) >= 1)"


@pytest.fixture(scope="module")
def page(browser, app_url):  # noqa: F811  (the fixtures, passed on)
    """One page of the shared app for the module's tests, loaded once."""
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.goto(app_url, wait_until="domcontentloaded", timeout=180_000)
    page.wait_for_selector("#sv-tour-btn", timeout=180_000)
    wait_until_live(page)
    yield page
    page.close()


def _drop(page, path: Path) -> None:
    """``path`` dropped on the engines tab (the file before it cleared first)."""
    page.get_by_role("tab", name="Your engine's numbers").click()
    clear = page.locator("#sv-engine-file button[aria-label*=Clear], #sv-engine-file button[aria-label*=clear]")
    if clear.count():
        clear.first.click()
    page.set_input_files("#sv-engine-file input[type=file]", str(path))


def _engine_file(engine: str, tmp_path: Path) -> Path:
    """The engine's file; vLLM's stream ends with ``finish_reason`` "stop", as a response that met its
    stop token does: its last chunk's last token may be a draft, so it is unknown."""
    path = FIXTURES / ONE_FILE[engine]
    if engine != "vllm":
        return path
    stopped = tmp_path / path.name
    stopped.write_text(path.read_text(encoding="utf-8").replace('"finish_reason": "length"', '"finish_reason": "stop"'),
                       encoding="utf-8")
    return stopped


@pytest.mark.parametrize("engine", ENGINES)
def test_an_engines_file_is_drawn_with_the_run_charts_and_its_unknown_tokens_marked(page, engine, tmp_path):
    path = _engine_file(engine, tmp_path)
    expected = read_engine_file(path.read_text(encoding="utf-8"), path.name)  # what the importer itself reads
    assert expected.engine == engine  # guessed from the file, as the page's "guess" does
    _drop(page, path)
    page.wait_for_function(HAS_TEXT, arg=["#sv-engine-summary", f"{path.name} · read as {ENGINE_NAMES[engine]}"],
                           timeout=60_000)
    # The summary can land before the charts are drawn (under load, all four still had no trace
    # when it did): wait for them, then read each one.
    with contextlib.suppress(PlaywrightTimeout):  # the assertion below names the chart that never came
        page.wait_for_function(ALL_DRAWN, arg=list(CHARTS), timeout=60_000)
    drawn = {sel: page.evaluate(TRACES, sel) for sel in CHARTS}
    assert all(n >= 1 for n in drawn.values()), drawn  # each file here has counts per pass or position
    table = page.inner_text("#sv-engine-figures")
    for figure in expected.figures:
        assert figure.engine_field.split("\n")[0][:30] in table, (figure, table)
    if not expected.tokens:
        assert "carries no text" in page.inner_text("#sv-engine-tokens")
        return
    kinds = list(expected.token_kinds or ())[:len(expected.tokens)]
    unknown = len(expected.tokens) - sum(1 for k in kinds if k in ("draft", "target"))
    assert unknown == (1 if engine == "vllm" else 0)  # the stopped stream's last token
    shown = page.evaluate("() => [...document.querySelectorAll('#sv-engine-tokens .sv-out .sv-tok')]"
                          ".map((el) => el.dataset.kind)")
    assert len(shown) == len(expected.tokens)
    assert shown.count("unknown") == unknown
    assert page.locator("#sv-engine-tokens .sv-out .sv-unknown").count() == unknown
    assert shown.count("draft") == kinds.count("draft")


def test_a_foreign_file_gets_the_importers_sentence_as_text(page, tmp_path):
    foreign = tmp_path / "notes.json"
    foreign.write_text('{"model": "<img src=x id=pwn-engine>"}', encoding="utf-8")
    before = page.inner_text("#sv-engine-summary")
    _drop(page, foreign)
    toast = page.locator("[data-testid=toast-body]")
    toast.first.wait_for(timeout=30_000)
    assert toast.first.inner_text().strip()
    assert not page.locator("#pwn-engine, img[src=x]").count()
    after = page.inner_text("#sv-engine-summary")  # the last file's, under gradio's "Error" mark
    assert before.strip() in after and "notes.json" not in after


#: The computed opacity of the first element a selector finds.
OPACITY = "(sel) => getComputedStyle(document.querySelector(sel)).opacity"


def test_the_engine_log_switch_greys_out_what_no_engine_logs(page):
    page.get_by_role("tab", name="Run").click()
    page.locator("summary, button, span", has_text="Replay, export and saved traces").first.click()
    page.set_input_files("#sv-load input[type=file]", str(TRACE))
    page.wait_for_function(HAS_TEXT, arg=["#sv-summary", "Loaded a saved trace"], timeout=60_000)
    rejected = "#sv-tokens .sv-out .sv-rejected"
    assert page.evaluate(OPACITY, rejected) != "0.3"
    page.locator("#sv-engine-log input").check()
    page.wait_for_function("() => document.documentElement.classList.contains('sv-engine-log')", timeout=10_000)
    assert page.evaluate(OPACITY, rejected) == "0.3"
    assert page.locator("#sv-tokens .sv-engine-log-only").is_visible()
    # The target's tokens look alike: an engine's flag does not tell a resample from a bonus.
    looks = "(sel) => getComputedStyle(document.querySelector('#sv-tokens .sv-out ' + sel)).backgroundColor"
    assert page.evaluate(looks, ".sv-resampled") == page.evaluate(looks, ".sv-bonus")
    page.locator(rejected).first.click()
    page.wait_for_function(HAS_TEXT, arg=["#sv-inspector", "Rejected draft token"], timeout=30_000)
    greyed = page.locator("#sv-inspector .sv-unlogged")
    assert greyed.count() >= 4 and "p_draft" in " ".join(greyed.all_inner_texts())
    assert page.evaluate(OPACITY, "#sv-inspector .sv-unlogged") == "0.3"
    assert page.evaluate(OPACITY, "#sv-inspector-plot") == "0.3"
    page.locator("#sv-engine-log input").uncheck()
    page.wait_for_function("() => !document.documentElement.classList.contains('sv-engine-log')", timeout=10_000)
    assert page.evaluate(OPACITY, "#sv-inspector .sv-unlogged") == "1"
