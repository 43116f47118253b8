"""The Run tab's stream costs bytes per round, not per run: the token panel is
append-only while a run streams, so gradio sends each update as an "append" of the new part."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from specviz.ui.draw.run_views import DONE_MARK, end_line, legend_html, stream_head, wrap_output

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SENT = re.compile(r'<i hidden class="sv-sent" data-t="[0-9.]+"></i>')


def test_a_whole_panel_has_the_streamed_shape():
    """A replay or a loaded trace renders like the end of a stream: legend, the tokens, a time
    marker and, when the run has ended, the done marker and the closing tag."""
    body = '<span class="sv-round" data-round="0"><span class="sv-tok sv-plain">hi</span></span>'
    done = wrap_output(body, done=True, generated_at=12.5)
    assert done == stream_head() + body + '<i hidden class="sv-sent" data-t="12.500"></i>' + DONE_MARK + "</div>"
    assert done.startswith(legend_html())
    assert DONE_MARK not in wrap_output(body) and wrap_output(body).endswith("</i></div>")


def test_the_end_line_is_plain_text():
    assert end_line("Done · <b>4</b> tokens") == '<div class="sv-end" role="status">Done · &lt;b&gt;4&lt;/b&gt; tokens</div>'


def test_the_token_panel_streams_as_small_appends_to_the_end_of_a_1024_token_run():
    """The page's stream generator, its postprocessing and gradio's own diff, as the server runs
    them (scripts/stream_bytes.py): after the first update every panel update is an append, the
    appends stay a few kB while the panel grows past 400 kB, and the appends rebuild the panel."""
    from scripts.stream_bytes import _changes, stream_updates

    panel, appends = None, []
    for data in stream_updates(1024, whole=False):
        edit = data[0]
        if panel is None:
            panel = edit  # the first update of a run is the whole value
            continue
        if not _changes(edit):
            continue
        assert len(edit) == 1 and edit[0][0] == "append" and edit[0][1] == [], edit[:1]
        appends.append(edit[0][2])
        panel += edit[0][2]
    sizes = [len(a.encode()) for a in appends]
    assert len(panel.encode()) > 400_000
    assert sizes[-1] < 4_000 and max(sizes) < 10_000, (sizes[-5:], max(sizes))
    assert panel.endswith(DONE_MARK + "</div>") and panel.count(DONE_MARK) == 1
    # the run says how it ended under its last token, where the eye is (a newcomer looked for "Done"
    # there and found it under the charts)
    assert re.search(r'<div class="sv-end" role="status">Done · 1024 tokens · the 1024-token limit</div>'
                     + SENT.pattern, panel), panel[-300:]
    # One time marker per update: the first (the panel's opening and its first rounds) and each append.
    assert panel.startswith(stream_head()) and len(SENT.findall(panel)) == len(appends) + 1
    assert panel.count('class="sv-tok ') - legend_html().count('class="sv-tok ') == 1024


def test_a_256_token_stream_redraws_at_most_one_chart_per_update_and_few_a_second():
    """what each streamed update costs the browser is bounded. Through the page's
    own stream, postprocessing and gradio's diff (scripts/stream_bytes.py, a simulated 60 ms per
    round): while the run streams no update redraws more than one chart (each Plotly redraw is one
    long task on a busy machine; five at once ran 1.5 s), charts are redrawn at most about once per
    simulated second, the token panel about every 0.4 s, and the panel's tokens carry their
    keyboard attributes in the HTML (so the browser does not rewrite every token after each update).
    The end draws each of the eight charts once, at most FINAL_CHARTS_PER_UPDATE per update (all
    eight in the last update were one task of 1.5-3 s on a busy machine). While streaming, no
    update carries both new tokens and a chart redraw (together they were one task of 250-550 ms).
    Fails on the code before: every summary update redrew all five charts."""
    from scripts.stream_bytes import CHARTS, TOKENS, _changes, stream_updates
    from specviz.ui.tabs.run_stream import FINAL_CHARTS_PER_UPDATE
    from specviz.ui.serve.state import FIGURES

    def redraws(edit) -> bool:  # a new figure for the chart (a skip after a figure diffs to "update")
        if isinstance(edit, dict):
            return "plot" in edit
        return any(op in ("add", "replace") and (path == ["plot"] or (not path and isinstance(value, dict)
                                                                     and "plot" in value))
                   for op, path, value in edit)

    round_s = 0.06
    updates = list(stream_updates(256, whole=False, round_ms=round_s * 1e3))
    charts_per_update = [sum(redraws(d) for d in data[CHARTS]) for data in updates]
    steps = -(-len(FIGURES) // FINAL_CHARTS_PER_UPDATE)  # the end's updates
    streamed, final = charts_per_update[:-steps], charts_per_update[-steps:]
    per_chart = [sum(redraws(data[CHARTS][j]) for data in updates[-steps:]) for j in range(len(FIGURES))]
    assert per_chart == [1] * len(FIGURES), per_chart  # the end shows every chart, each drawn once
    assert max(final) <= FINAL_CHARTS_PER_UPDATE, final
    assert max(streamed[1:], default=0) <= 1, streamed  # update 0: the panel's first, whole value
    # A streamed chart travels alone: a redraw riding a token update made one task of both.
    both = [i for i, data in enumerate(updates[1:-steps], 1)
            if _changes(data[TOKENS]) and any(redraws(d) for d in data[CHARTS])]
    assert not both, f"updates {both} carry new tokens and a chart redraw"
    panel = updates[0][TOKENS] + "".join(e[0][2] for e in (data[TOKENS] for data in updates[1:])
                                         if _changes(e) and e[0][0] == "append")
    seconds = panel.count('class="sv-round"') * round_s  # the simulated clock: a round each round_s
    assert sum(streamed[1:]) <= seconds / 1.0 + 1, (sum(streamed[1:]), seconds)
    token_updates = sum(_changes(data[TOKENS]) for data in updates)
    # Every 0.4 s, and with each summary update (about once a second).
    assert token_updates <= seconds / 0.4 + seconds / 1.0 + 2, (token_updates, seconds)
    assert panel.count('role="button"') >= 256 and panel.count('tabindex="0"') >= 256


def test_the_recorded_runs_caption_is_the_legends_first_line_as_text():
    """The page opens on a recorded run whose prompt is not the Run tab's: the token box's sticky
    legend names it first, as text (a trace's prompt comes from outside the code)."""
    from specviz.ui.draw.run_views import with_caption

    panel = with_caption(wrap_output("", done=True), 'A recorded run, on “<img src=x onerror=alert(1)>”.')
    assert panel.startswith('<div class="sv-legend"><span class="sv-caption">A recorded run, on “&lt;img')
    assert "<img" not in panel and panel.count("sv-caption") == 1


def test_the_page_opens_on_the_pairs_recorded_run_named_with_its_prompt():
    """recorded_run's first update: the bundled pair trace, its caption naming the pair and the prompt."""
    from specviz.ui.tabs import replay

    first = next(replay.recorded_run(None))
    tokens = first[0]
    caption = re.search(r'<span class="sv-caption">(.*?)</span>', tokens).group(1)
    assert "qwen2.5-coder-1.5b-instruct" in caption and "is_prime" in caption and caption.endswith("prompt at left.")
