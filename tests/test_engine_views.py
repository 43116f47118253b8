"""An engine's imported numbers on the page, without a browser: the counts become the Run tab's
figures, defined as the library defines them (:mod:`specviz.ui.draw.engine_counts`); the views
escape everything from the file and mark what the engine cannot tell
(:mod:`specviz.ui.draw.engine_views`); the tab's callback bounds the upload and turns the
importer's error into one sentence (:mod:`specviz.ui.tabs.engines_tab`); and the Run tab's inspector
marks what no engine logs for the engine-log switch."""

from __future__ import annotations

import gradio as gr
import pytest

from specviz.figures.analysis import analyse
from specviz.diagnose.diagnostics import acceptance_by_position, accepted_length_histogram, zero_accept_share
from specviz.engine_logs import Figure, ImportedRun
from specviz.core.records import ACCEPTED, BONUS, RESAMPLED, DraftedToken, EmittedToken, Round
from specviz.ui.tabs import engines_tab
from specviz.ui.draw.engine_counts import engine_figures, passes_from_positions
from specviz.ui.draw.engine_views import (engine_charts, engine_summary_markdown, engine_tokens_html,
                                          figures_markdown)
from specviz.ui.draw.escape import as_text
from specviz.ui.draw.run_views import UNLOGGED, inspector_markdown

MARKUP = "<img src=x onerror=alert(1)>**b**|[a](https://evil.invalid)"


def imported(**fields) -> ImportedRun:
    """An ImportedRun as an importer returns it: per-pass counts of four passes, K = 3."""
    base = dict(engine="vllm", source="run.jsonl", k=3, accepted_per_pass=(3, 0, 1, 2), drafted_per_pass=(3, 3, 3, 3),
                accepted_by_position=None, passes=4, cumulative=False, tokens=None, token_kinds=None,
                figures=(Figure("acceptance rate (÷ drafted)", 0.5, "per_step_accepted", "summed, ÷ drafted"),),
                notes=())
    return ImportedRun(**{**base, **fields})


def count_round(index: int, kept: int, drafted: int) -> Round:
    """A recorded chain pass with only its counts: ``drafted`` drafts, the first ``kept`` accepted,
    tested up to the first rejection, then the target's token (no probabilities)."""
    drafts = [DraftedToken(-1, "", 0.0, 0.0, 0.0, 0.0, accepted=i < kept, tested=i <= kept) for i in range(drafted)]
    last = BONUS if kept == drafted else RESAMPLED
    emitted = [EmittedToken(-1, "", ACCEPTED if i < kept else last, 0.0, index) for i in range(kept + 1)]
    return Round(index=index, drafted=drafts, n_accepted=kept, emitted=emitted, k=drafted)


def test_the_counts_give_the_figures_the_library_computes_from_the_same_passes():
    kept, drafted = (3, 0, 1, 2, 0, 2, 1), (3, 3, 3, 3, 0, 2, 3)  # one pass drafted nothing, one only 2
    figures = engine_figures(imported(accepted_per_pass=kept, drafted_per_pass=drafted), 0.05, 1.0)
    rounds = [count_round(i, a, d) for i, (a, d) in enumerate(zip(kept, drafted))]
    library = analyse(rounds, 3, wall_s=0.0)
    a, d = figures.analysis, figures.diagnostics
    for name in ("target_passes", "proposed", "tested", "accepted", "emitted", "per_position"):
        assert getattr(a, name) == getattr(library, name), name
    for name in ("alpha", "acceptance_rate", "tokens_per_pass"):
        assert getattr(a, name) == pytest.approx(getattr(library, name)), name
    assert d.positions == acceptance_by_position(rounds, 3)
    assert d.accepted_length_histogram == accepted_length_histogram(rounds, 3)
    assert d.zero_accept_share == zero_accept_share(rounds)
    assert figures.passes_by_tokens == {1: 2, 2: 2, 3: 2, 4: 1} and figures.short == 2


def test_per_pass_counts_give_alpha_over_tested_and_both_acceptances_by_position():
    figures = engine_figures(imported(), c=0.05, v=1.0)
    a, d = figures.analysis, figures.diagnostics
    # kept 3+0+1+2 = 6; tested 3+1+2+3 = 9 (÷ tested), proposed 12 (÷ drafted)
    assert a.alpha == pytest.approx(6 / 9) and a.acceptance_rate == pytest.approx(6 / 12)
    assert a.tokens_per_pass == pytest.approx((4 + 1 + 2 + 3) / 4)
    assert d.accepted_length_histogram == [1, 1, 1, 1] and d.zero_accept_share == pytest.approx(0.25)
    full = [p.full for p in d.positions]
    conditional = [p.conditional for p in d.positions]
    assert full == pytest.approx([3 / 4, 2 / 4, 1 / 4])  # kept at i ÷ drafting passes
    assert conditional == pytest.approx([3 / 4, 2 / 3, 1 / 2])  # kept at i ÷ tested at i
    assert d.engine_k is not None and 0 <= d.engine_k.k <= 3


def test_per_position_totals_and_the_histogram_give_the_same_exact_figures():
    # vLLM's num_accepted_tokens_per_pos: 10 drafts; 7 kept position 0, 4 position 1, 1 position 2.
    assert passes_from_positions(10, (7, 4, 1)) == [3, 3, 3, 1]
    by_positions = engine_figures(imported(accepted_per_pass=None, drafted_per_pass=None,
                                           accepted_by_position=(7, 4, 1), passes=10), 0.05, 1.0)
    by_histogram = engine_figures(imported(accepted_per_pass=None, drafted_per_pass=None,
                                           accepted_histogram=(3, 3, 3, 1)), 0.05, 1.0)
    for figures in (by_positions, by_histogram):
        d, a = figures.diagnostics, figures.analysis
        assert "order of the passes is not in the file" in figures.how
        assert d.accepted_length_histogram == [3, 3, 3, 1] and d.zero_accept_share == pytest.approx(0.3)
        assert [p.full for p in d.positions] == pytest.approx([0.7, 0.4, 0.1])
        assert [p.conditional for p in d.positions] == pytest.approx([0.7, 4 / 7, 1 / 4])  # count_i ÷ count_{i−1}
        assert a.alpha == pytest.approx(12 / (10 + 7 + 4)) and a.tokens_per_pass == pytest.approx(2.2)
        assert figures.passes_by_tokens == {1: 3, 2: 3, 3: 3, 4: 1}
    # The same passes one by one give the same figures.
    one_by_one = engine_figures(imported(accepted_per_pass=(0, 0, 0, 1, 1, 1, 2, 2, 2, 3),
                                         drafted_per_pass=(3,) * 10), 0.05, 1.0)
    assert one_by_one.analysis.alpha == pytest.approx(by_histogram.analysis.alpha)
    assert one_by_one.diagnostics.positions == by_histogram.diagnostics.positions


def test_a_server_lifetime_histogram_is_read_as_counts_not_records():
    figures = engine_figures(imported(accepted_per_pass=None, drafted_per_pass=None, cumulative=True,
                                      accepted_histogram=(4 * 10**9, 10**9)), 0.05, 1.0)
    assert figures.analysis.target_passes == 5 * 10**9 and figures.diagnostics.zero_accept_share == pytest.approx(0.8)


def test_tested_counts_the_file_tells_replace_the_chains():
    figures = engine_figures(imported(tested_by_position=(4, 2, 1)), 0.05, 1.0)
    assert [p.conditional for p in figures.diagnostics.positions] == pytest.approx([3 / 4, 2 / 2, 1 / 1])
    assert figures.analysis.alpha == pytest.approx(6 / 7)
    with pytest.raises(ValueError, match="tested 1 times"):
        engine_figures(imported(tested_by_position=(1, 2, 1)), 0.05, 1.0)


def test_counts_that_contradict_each_other_are_refused():
    with pytest.raises(ValueError, match="above the 7 passes"):
        passes_from_positions(10, (7, 8))
    with pytest.raises(ValueError, match="4 passes of accepted counts but 2"):
        engine_figures(imported(drafted_per_pass=(3, 3)), 0.05, 1.0)
    with pytest.raises(ValueError, match="pass 1: 2 drafts kept of 1"):
        engine_figures(imported(accepted_per_pass=(2,), drafted_per_pass=(1,)), 0.05, 1.0)
    with pytest.raises(ValueError, match="negative"):
        engine_figures(imported(accepted_per_pass=None, accepted_histogram=(3, -1)), 0.05, 1.0)
    with pytest.raises(ValueError, match="K = 100000"):
        engine_figures(imported(k=100_000), 0.05, 1.0)


def test_totals_only_give_notes_where_the_counts_would_be_and_alpha_from_the_file():
    run = imported(accepted_per_pass=None, drafted_per_pass=None, passes=None,
                   figures=(Figure("per-token α (÷ tested)", 0.6, "draft_n_accepted", "÷ tested"),))
    figures = engine_figures(run, 0.05, 1.0)
    assert figures.analysis is None and figures.diagnostics is None
    tpp, lengths, positions, closed = engine_charts(run, figures, 0.05, 1.0)
    for fig in (tpp, lengths, positions):
        assert "totals only" in fig.layout.annotations[0].text and not fig.data
    assert closed.data[0].type == "heatmap" and closed.data[-1].x == (0.6,)  # the run marked at its α


def test_imported_text_is_escaped_and_its_unknown_tokens_marked():
    run = imported(tokens=("Hi", MARKUP, " there", "!"), token_kinds=("draft", "target", "unknown"))
    html = engine_tokens_html(run)
    assert "<img" not in html and "**b**" not in html and "](" not in html
    assert html.count('data-kind="draft"') == 1 and html.count('data-kind="target"') == 1
    assert html.count('data-kind="unknown"') == 2  # told unknown, and past the kinds the file gave
    assert "sv-unknown" in html and "carries no text" in engine_tokens_html(imported())


def test_the_figures_table_names_each_engine_field_and_escapes_it():
    run = imported(figures=(Figure("accept length (bonus out)", 1.75, MARKUP, ""),
                            Figure("per-token α (accepted ÷ tested)", 0.6, "draft_n_accepted", "÷ draft_n")))
    table = figures_markdown(run)
    assert table.count("\n| ") == 3  # header row and two figures
    assert "<img" not in table and "|[a]" not in table and "as reported" in table and as_text("÷ draft_n") in table
    summary = engine_summary_markdown(imported(source=MARKUP, cumulative=True, notes=(MARKUP,)),
                                      engine_figures(imported(), 0.05, 1.0), 0.05, 1.0)
    assert "<img" not in summary and "whole life" in summary and "would pick **K =" in summary


def test_the_tab_refuses_a_file_too_large_not_text_or_unreadable_in_one_sentence(tmp_path, monkeypatch):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    monkeypatch.setattr(engines_tab, "MAX_ENGINE_FILE_BYTES", 1024)
    with pytest.raises(gr.Error, match="at most"):
        engines_tab.import_engine(str(big), "guess", 0.05, 1.0)
    binary = tmp_path / "metrics.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(gr.Error, match="not UTF-8 text"):
        engines_tab.import_engine(str(binary), "guess", 0.05, 1.0)
    with pytest.raises(gr.Error, match="engine must be one of"):
        engines_tab.import_engine(str(binary), "<b>tgi</b>", 0.05, 1.0)
    with pytest.raises(gr.Error, match="Verify cost v must be a number in"):
        engines_tab.import_engine(str(binary), "guess", 0.05, 0)
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"hello": "<b>world</b>"}', encoding="utf-8")
    with pytest.raises(gr.Error) as err:
        engines_tab.import_engine(str(foreign), "guess", 0.05, 1.0)
    assert "<b>" not in str(err.value)  # the sentence is shown as text


def test_the_inspector_marks_what_no_engine_logs_and_keeps_what_it_does():
    round_ = Round(index=0, n_accepted=1, drafted=[
        DraftedToken(1, "a", 0.5, 0.6, 1.0, 0.2, accepted=True, tested=True),
        DraftedToken(2, "b", 0.7, 0.1, 0.1429, 0.9, accepted=False, tested=True)],
        emitted=[EmittedToken(1, "a", ACCEPTED, 0.6, 0),
                 EmittedToken(3, "c", RESAMPLED, 0.3, 0, rejected_id=2, rejected_text="b", p_source=0.4)])
    accepted, resampled = inspector_markdown(round_, 0), inspector_markdown(round_, 1)
    for story in (accepted, resampled):
        greyed = [part.split("</span>")[0] for part in story.split(f'class="{UNLOGGED}"')[1:]]
        assert any("p_draft =" in g for g in greyed) and any("uniform draw u" in g for g in greyed)
        kept = story.split(f'class="{UNLOGGED}"')[0]
        assert "Verify pass 1" in kept  # the pass and its counts are what an engine logs
    assert "→ **accepted**" in accepted.split("</span>")[-1]  # the verdict itself is not greyed
    greyed = "".join(part.split("</span>")[0] for part in resampled.split(f'class="{UNLOGGED}"')[1:])
    assert "Rejected draft token" in greyed and "residual" in greyed and "**Resampled**" not in greyed
