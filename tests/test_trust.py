"""A headline that is right or absent: when a sanity check says the plain
baseline or the run is unreliable, every front-end says "not measurable now: …" where the speedup
would be, with no figure: the Run tab's summary and speedup chart, the Experiments table and
chart, the side-by-side heads, the CLI and the bench table. One rule decides
(:func:`specviz.figures.speedup.speedup_doubt`, and :func:`specviz.run.sweep.speedup_doubts` across a
sweep's rows)."""

from __future__ import annotations

import dataclasses
import re

from test_baseline import plain_round, spec_round

from specviz.figures.analysis import analyse
from specviz.figures.speedup import NOT_MEASURABLE, PlainBaseline, speedup_doubt
from specviz.run.sweep import row_speedups, speedup_doubts

# The run's own plain-shaped passes take 74 ms; a baseline of 192 ms a step was timed while busy.
ROUNDS = [spec_round(i, 80.0) for i in range(6)] + [plain_round(i, 74.0) for i in range(6, 10)]
BUSY = PlainBaseline(192.0, 5.0)
FAIR = PlainBaseline(72.0, 5.0)


def _bold_figures(markdown: str) -> list[str]:
    return re.findall(r"\*\*[^*]*\d+\.\d+×[^*]*\*\*", markdown)


def test_a_busy_baseline_gives_words_not_a_bold_figure_in_the_summary():
    from specviz.ui.draw.run_views import summary_markdown

    a = analyse(ROUNDS, 4, wall_s=1.0, baseline=BUSY)
    assert a.speedup is not None and "overstated" in speedup_doubt(a)
    text = summary_markdown(a, "**Done**")
    row = next(line for line in text.splitlines() if line.startswith("| measured speedup"))
    assert f"{NOT_MEASURABLE}: the plain baseline" in row and "×**" not in row, row
    assert f"{a.speedup:.2f}×" not in text and not _bold_figures(text), text
    assert text.count("overstated") == 1  # said once, in the row, not again as a note
    fair = summary_markdown(analyse(ROUNDS, 4, wall_s=1.0, baseline=FAIR), "**Done**")
    assert NOT_MEASURABLE not in fair and _bold_figures(fair)


def test_scattered_baseline_samples_are_doubted_too():
    scattered = PlainBaseline(75.0, 0.0, (40.0, 100.0, 45.0), (40, 40, 40), 0.0)
    a = analyse(ROUNDS, 4, wall_s=1.0, baseline=scattered)
    assert "scatter widely" in a.speedup_doubt
    assert a.scalars()["speedup_doubt"] == a.speedup_doubt  # the CLI's JSON and the bench rows carry it


def test_the_speedup_chart_draws_no_doubted_line():
    from specviz.ui.serve.state import RunState

    rounds = [dataclasses.replace(r, elapsed_s=0.1 * (i + 1)) for i, r in enumerate(ROUNDS)]
    state = RunState(k=4, rounds=rounds, html=[""] * len(ROUNDS), baseline=BUSY, finished=True)
    figure = state.view(None, "**Done**", True).speedup
    assert not figure.data and NOT_MEASURABLE in str(figure.layout.annotations)
    state.baseline = FAIR
    assert state.view(None, "**Done**", True).speedup.data


def _row(t, step_ms, speedup, doubt=None):
    return {"temperature": t, "alpha": 0.6, "acceptance_rate": 0.5, "tokens_per_pass": 2.1,
            "predicted_tokens_per_pass": 2.2, "speedup": speedup, "speedup_low": speedup * 0.9,
            "speedup_high": speedup * 1.1, "theoretical_speedup": 1.9, "cost_ratio_c": 0.05,
            "verify_cost_v": 1.1, "tokens_per_s": 20.0, "plain_step_ms": step_ms, "speedup_doubt": doubt,
            "draft": "ngram", "drafter": "prompt lookup", "accepted": 10, "tested": 16}


def test_experiment_rows_with_an_inconsistent_baseline_say_so():
    from specviz.ui.draw import charts
    from specviz.ui.draw.tab_views import sweep_table

    # T = 0 and T = 0.3: the same α and tokens per pass, but one baseline was timed 1.7× slower.
    rows = [_row(0.0, 120.0, 2.94), _row(0.3, 70.0, 1.75), _row(0.7, 72.0, 1.7)]
    doubts = speedup_doubts(rows)
    assert doubts[0] and "1.7× slower" in doubts[0] and doubts[1:] == [None, None]
    table = sweep_table(rows, "temperature")
    assert table[0][5].startswith(NOT_MEASURABLE) and "2.94" not in " ".join(table[0])
    assert table[1][5] == "1.75× (1.57–1.93×)"  # with its range, as the Run tab writes it
    figure = charts.sweep_figure(rows, "temperature", "speedup")
    assert figure.data[0].y[0] is None and figure.data[0].y[1] == 1.75
    assert any(NOT_MEASURABLE in a.text for a in figure.layout.annotations)
    # Two rows that disagree: neither can be told right.
    assert all(speedup_doubts(rows[:2]))
    # A row's own doubt (analysis) is kept; the CLI writes the same words.
    own = [_row(0.0, 70.0, 3.0, doubt="The plain baseline is odd."), _row(0.3, 70.0, 1.7)]
    shown = row_speedups(own)
    assert shown[0] == f"{NOT_MEASURABLE}: the plain baseline is odd." and shown[1] == "1.70× (1.53–1.87×)"


def test_the_cli_writes_the_words_not_the_figure():
    from specviz.cli import format_text
    from specviz.diagnose.diagnostics import diagnose

    a = analyse(ROUNDS, 4, wall_s=1.0, baseline=BUSY)
    result = {**a.scalars(), **diagnose(ROUNDS, a.k, a.cost_ratio_c, a.verify_cost_v).to_dict(), "tokens": [], "text": "", "finish_reason": "length", "notes": [], "draft": "ngram",
              "target": "t", "device": "cpu", "dtype": "float32"}
    line = format_text(result, color=False)
    assert f"speedup {NOT_MEASURABLE}: the plain baseline" in line and f"{a.speedup:.2f}×" not in line
