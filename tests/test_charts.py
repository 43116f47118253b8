"""Plotly figures of specviz.ui.draw.charts, built from hand-made trace records."""

from __future__ import annotations

import json
import math
import random

import plotly.graph_objects as go
import pytest

from specviz.figures import theory
from specviz.figures.analysis import analyse
from specviz.core.records import ACCEPTED, BONUS, PLAIN, RESAMPLED, DraftedToken, EmittedToken, Round
from specviz.ui.draw import charts


# --------------------------------------------------------------------------- helpers
def make_round(index: int, n_proposed: int, n_accepted: int, n_emitted: int | None = None) -> Round:
    """A round that proposed ``n_proposed`` drafts and accepted the first ``n_accepted``.

    It emits the accepted drafts plus one target token (resampled, bonus, or plain when nothing
    was proposed), or only the first ``n_emitted`` of those (an EOS cut the round short).
    """
    assert 0 <= n_accepted <= n_proposed
    drafted = [
        DraftedToken(id=100 + j, text=f"d{j}", p_draft=0.5, p_target=0.4, accept_prob=0.8, uniform=0.3,
                     accepted=j < n_accepted, tested=j <= n_accepted)
        for j in range(n_proposed)
    ]
    if not n_proposed:
        last = PLAIN
    elif n_accepted == n_proposed:
        last = BONUS
    else:
        last = RESAMPLED
    kinds = [ACCEPTED] * n_accepted + [last]
    emitted = [EmittedToken(id=200 + j, text=f"t{j}", kind=kind, p_target=0.4, round=index)
               for j, kind in enumerate(kinds)]
    if n_emitted is not None:
        emitted = emitted[:n_emitted]
    return Round(index=index, drafted=drafted, n_accepted=n_accepted, emitted=emitted,
                 draft_ms=4.0 * n_proposed, draft_steps=n_proposed, verify_ms=20.0)


def alpha_of(rounds: list[Round]) -> float | None:
    """The run's per-token α, as the app passes it to the charts."""
    return analyse(rounds, 4, 1.0).alpha


def simulate(alpha: float, k: int, n_rounds: int, seed: int = 0) -> list[Round]:
    """Rounds from the theory's model: each draft accepted independently with prob. alpha."""
    rng = random.Random(seed)
    rounds = []
    for i in range(n_rounds):
        accepted = 0
        while accepted < k and rng.random() < alpha:
            accepted += 1
        rounds.append(make_round(i, k, accepted))
    return rounds


def trace(fig: go.Figure, name: str):
    matches = [t for t in fig.data if t.name == name]
    assert len(matches) == 1, [t.name for t in fig.data]
    return matches[0]


def annotation_texts(fig: go.Figure) -> list[str]:
    return [a.text for a in fig.layout.annotations]


ROUNDS = [
    make_round(0, 4, 4),  # 5 emitted
    make_round(1, 4, 1),  # 2 emitted
    make_round(2, 0, 0),  # prompt lookup found nothing: 1 plain token
    make_round(3, 4, 0),  # 1 emitted
    make_round(4, 2, 2),  # near the length limit: 3 emitted
]

BUILDERS = {
    "alpha": lambda: charts.alpha_figure(ROUNDS),
    "alpha_empty": lambda: charts.alpha_figure([]),
    "alpha_plain": lambda: charts.alpha_figure([make_round(0, 0, 0), make_round(1, 0, 0)]),
    "tpp": lambda: charts.tokens_per_pass_figure(ROUNDS, 4, alpha_of(ROUNDS)),
    "tpp_empty": lambda: charts.tokens_per_pass_figure([], 4, alpha_of([])),
    "tpp_plain": lambda: charts.tokens_per_pass_figure([make_round(0, 0, 0)], 4, alpha_of([make_round(0, 0, 0)])),
    "speedup": lambda: charts.speedup_figure([{"t": 0.5, "speedup": 0.8}, {"t": 1.0, "speedup": 1.6}], 2.1),
    "speedup_empty": lambda: charts.speedup_figure([], None),
    "lossless": lambda: charts.lossless_figure([" the", " a", "\n"], [0.5, 0.3, 0.2], [0.52, 0.27, 0.21],
                                              [0.49, 0.31, 0.2]),
    "lossless_empty": lambda: charts.lossless_figure([], [], [], []),
}


# --------------------------------------------------------------------------- shared look
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_figure_is_valid_plotly_with_the_shared_look(name):
    fig = BUILDERS[name]()
    assert isinstance(fig, go.Figure)
    # The module skips validation for speed: a validating rebuild must accept every property.
    rebuilt = go.Figure(json.loads(fig.to_json()))
    assert rebuilt.layout.height == charts.HEIGHT == 300
    assert fig.layout.template.layout.plot_bgcolor == "white"  # plotly_white, not the default grey
    assert fig.layout.uirevision  # zoom survives rebuilds
    assert fig.layout.title.text


@pytest.mark.parametrize("name", sorted(n for n in BUILDERS if n.endswith("_empty")))
def test_empty_input_gives_a_titled_waiting_figure(name):
    fig = BUILDERS[name]()
    assert len(fig.data) == 0
    assert fig.layout.title.text
    assert any("waiting for the first round" in t for t in annotation_texts(fig))


def test_uirevision_is_stable_across_rebuilds_and_distinct_per_chart():
    assert charts.alpha_figure(ROUNDS[:2]).layout.uirevision == charts.alpha_figure(ROUNDS).layout.uirevision
    assert charts.alpha_figure([]).layout.uirevision == charts.alpha_figure(ROUNDS).layout.uirevision
    revisions = {BUILDERS[n]().layout.uirevision for n in ("alpha", "tpp", "speedup", "lossless")}
    assert len(revisions) == 4


def test_kind_colors_are_the_agreed_palette():
    assert charts.KIND_COLORS == {
        "accepted": "#2e9e5b",
        "resampled": "#e8833a",
        "rejected": "#d64545",
        "bonus": "#3b6fd8",
        "plain": "#8c8c8c",
    }


def test_trace_count_does_not_grow_with_the_run():
    short, long = simulate(0.7, 4, 5), simulate(0.7, 4, 2000)
    assert len(charts.alpha_figure(short).data) == len(charts.alpha_figure(long).data) == 3
    tpp_short = charts.tokens_per_pass_figure(short, 4, alpha_of(short))
    assert len(tpp_short.data) == len(charts.tokens_per_pass_figure(long, 4, alpha_of(long)).data) == 2


# --------------------------------------------------------------------------- alpha
def test_alpha_figure_plots_each_round_and_skips_rounds_without_drafts():
    fig = charts.alpha_figure(ROUNDS)
    per_round = trace(fig, "acceptance rate this round")
    # Passes count from 1, as in the inspector and the rounds CSV; pass 3 proposed nothing.
    assert list(per_round.x) == [1, 2, 4, 5]
    assert per_round.hovertemplate.startswith("pass %{x}")
    assert list(trace(fig, "running acceptance rate").x) == [1, 2, 3, 4, 5]
    assert fig.layout.xaxis.title.text == "verify pass"
    assert list(per_round.y) == [1.0, 0.25, 0.0, 1.0]
    assert [list(c) for c in per_round.customdata] == [[4, 4], [1, 4], [0, 4], [2, 2]]
    assert "accepted" in per_round.hovertemplate
    assert per_round.marker.color == charts.KIND_COLORS["accepted"]
    assert list(fig.layout.yaxis.range) == [0.0, 1.05]


def test_alpha_running_mean_ends_at_total_accepted_over_proposed():
    rounds = simulate(0.6, 5, 300, seed=3)
    fig = charts.alpha_figure(rounds)
    running = trace(fig, "running acceptance rate")
    total_acc = sum(r.n_accepted for r in rounds)
    total_prop = sum(r.n_proposed for r in rounds)
    assert running.y[-1] == pytest.approx(total_acc / total_prop)
    assert running.y[0] == pytest.approx(rounds[0].n_accepted / 5)
    assert f"{total_acc / total_prop:.2f}" in fig.layout.title.text


def test_alpha_running_mean_weights_rounds_by_proposals():
    # 4/4 then 0/1: the pooled rate is 0.8, not the mean of per-round rates (0.5).
    fig = charts.alpha_figure([make_round(0, 4, 4), make_round(1, 1, 0)])
    assert trace(fig, "running acceptance rate").y[-1] == pytest.approx(0.8)


def test_per_token_alpha_counts_only_tested_drafts():
    # Round 1: 1 accepted, 1 rejected, 2 never tested -> 2 tested. Round 3: 0 of 1 tested.
    rounds = [make_round(0, 4, 4), make_round(1, 4, 1), make_round(2, 4, 0)]
    assert alpha_of(rounds) == pytest.approx(5 / (4 + 2 + 1))
    line = trace(charts.alpha_figure(rounds), "per-token α (accepted ÷ tested: the theory's α)")
    assert line.y[-1] == pytest.approx(5 / 7)
    assert alpha_of([make_round(0, 0, 0)]) is None


def test_alpha_figure_for_plain_decoding_says_alpha_is_undefined():
    fig = BUILDERS["alpha_plain"]()
    assert len(fig.data) == 0
    assert any("α is undefined" in t for t in annotation_texts(fig))


# --------------------------------------------------------------------------- tokens per pass
def test_tokens_per_pass_histogram_fractions():
    fig = charts.tokens_per_pass_figure(ROUNDS, 4, alpha_of(ROUNDS))
    bars = trace(fig, "observed")
    assert list(bars.x) == [1, 2, 3, 4, 5]
    # Emitted per round: 5, 2, 1, 1, 3.
    assert list(bars.y) == pytest.approx([0.4, 0.2, 0.2, 0.0, 0.2])
    assert math.fsum(bars.y) == pytest.approx(1.0)
    assert list(bars.customdata) == [2, 1, 1, 0, 1]


def test_tokens_per_pass_theory_curve_uses_alpha_per_tested_draft():
    fig = charts.tokens_per_pass_figure(ROUNDS, 4, alpha_of(ROUNDS))
    alpha = alpha_of(ROUNDS)
    theory_trace = next(t for t in fig.data if t.name.startswith("theory"))
    assert list(theory_trace.x) == [1, 2, 3, 4, 5]
    assert list(theory_trace.y) == pytest.approx(theory.tokens_per_pass_distribution(alpha, 4))
    hover = theory_trace.hovertemplate
    assert "assumes K = 4" in hover
    assert "2 of 5 passes proposed fewer" in hover  # round 2 (none) and round 4 (2 drafts)


def test_tokens_per_pass_marks_observed_and_theoretical_means():
    fig = charts.tokens_per_pass_figure(ROUNDS, 4, alpha_of(ROUNDS))
    observed = (5 + 2 + 1 + 1 + 3) / 5
    predicted = theory.expected_tokens_per_pass(alpha_of(ROUNDS), 4)
    vlines = sorted(s.x0 for s in fig.layout.shapes if s.x0 == s.x1)
    assert vlines == pytest.approx(sorted([observed, predicted]))
    texts = annotation_texts(fig)
    assert f"mean {observed:.2f}" in texts
    assert f"theory {predicted:.2f}" in texts


def test_tokens_per_pass_theory_agrees_with_runs_from_the_theory_model():
    # With accepted/proposed (biased low) as α the theoretical mean would be ~0.6 tokens short.
    rounds = simulate(0.8, 4, 4000, seed=11)
    fig = charts.tokens_per_pass_figure(rounds, 4, alpha_of(rounds))
    observed = math.fsum(x * y for x, y in zip(trace(fig, "observed").x, trace(fig, "observed").y))
    theory_trace = next(t for t in fig.data if t.name.startswith("theory"))
    predicted = math.fsum(x * y for x, y in zip(theory_trace.x, theory_trace.y))
    assert observed == pytest.approx(theory.expected_tokens_per_pass(0.8, 4), abs=0.06)
    assert predicted == pytest.approx(observed, abs=0.03)


def test_tokens_per_pass_counts_rounds_cut_short_and_wider_runs():
    # An EOS cut round 0 to 2 tokens; k=2 is smaller than the 5 tokens round 1 emitted.
    rounds = [make_round(0, 4, 4, n_emitted=2), make_round(1, 4, 4)]
    bars = trace(charts.tokens_per_pass_figure(rounds, 2, alpha_of(rounds)), "observed")
    assert list(bars.x) == [1, 2, 3, 4, 5]
    assert list(bars.y) == pytest.approx([0.0, 0.5, 0.0, 0.0, 0.5])


def test_tokens_per_pass_for_plain_decoding_has_no_theory():
    fig = charts.tokens_per_pass_figure([make_round(i, 0, 0) for i in range(3)], 4, None)
    assert [t.name for t in fig.data] == ["observed"]
    assert trace(fig, "observed").y[0] == 1.0
    assert any("α is undefined" in t for t in annotation_texts(fig))


def test_tokens_per_pass_rejects_negative_k():
    with pytest.raises(ValueError):
        charts.tokens_per_pass_figure(ROUNDS, -1, alpha_of(ROUNDS))


# --------------------------------------------------------------------------- speedup
def test_speedup_figure_lines_and_slowdown_region():
    points = [{"t": 0.2, "speedup": 0.6}, {"t": 0.7, "speedup": 1.2}, {"t": 1.5, "speedup": 1.7}]
    fig = charts.speedup_figure(points, 2.3)
    measured = trace(fig, "measured")
    assert list(measured.x) == [0.2, 0.7, 1.5]
    assert list(measured.y) == [0.6, 1.2, 1.7]
    hlines = {s.y0: s for s in fig.layout.shapes if s.type == "line"}
    assert set(hlines) == {1.0, 2.3}
    assert hlines[2.3].line.dash == "dash"
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(rects) == 1 and (rects[0].y0, rects[0].y1) == (0.0, 1.0)
    texts = annotation_texts(fig)
    assert "plain decoding" in texts and "slower than plain" in texts
    assert any(t.startswith("theory 2.30") for t in texts)
    assert fig.layout.yaxis.range[0] == 0.0 and fig.layout.yaxis.range[1] > 2.3


def test_speedup_figure_shows_the_range_as_a_band_and_in_the_title():
    points = [{"t": 0.5, "pass": 3, "speedup": 1.1, "low": 0.9, "high": 1.3},
              {"t": 1.0, "pass": 7, "speedup": 1.12, "low": 1.05, "high": 1.19}]
    fig = charts.speedup_figure(points, None)
    band = trace(fig, "range")
    assert list(band.y) == [0.9, 1.05] and band.fill == "tonexty"
    assert list(fig.data[0].y) == [1.3, 1.19]  # the band's upper edge, filled down to the lower
    assert "1.05–1.19×" in fig.layout.title.text
    measured = trace(fig, "measured")
    assert [list(c) for c in measured.customdata] == [[3, 0.9, 1.3], [7, 1.05, 1.19]]
    assert "after pass %{customdata[0]}" in measured.hovertemplate and "slowest and the fastest plain run" in \
        measured.hovertemplate
    go.Figure(json.loads(fig.to_json()))  # valid when validated
    assert fig.layout.yaxis.range[1] > 1.3
    # Without a range: no band, and the title has the value alone.
    plain = charts.speedup_figure([{"t": 1.0, "speedup": 1.12}], None)
    assert [t.name for t in plain.data] == ["measured"] and "–" not in plain.layout.title.text


def test_speedup_figure_title_calls_a_slowdown_a_slowdown():
    fig = charts.speedup_figure([{"t": 1.0, "speedup": 1.3}, {"t": 2.0, "speedup": 0.7}], None)
    assert "slowdown" in fig.layout.title.text
    assert "0.7×" in fig.layout.title.text
    assert not [s for s in fig.layout.shapes if s.type == "line" and s.y0 != 1.0]  # no theory line
    fast = charts.speedup_figure([{"t": 1.0, "speedup": 1.8}], None)
    assert "1.8× faster" in fast.layout.title.text


def test_speedup_figure_skips_non_finite_points():
    fig = charts.speedup_figure([{"t": 0.1, "speedup": float("inf")}, {"t": 0.2, "speedup": 1.1}], float("nan"))
    assert list(trace(fig, "measured").y) == [1.1]
    assert charts.speedup_figure([{"t": 0.1, "speedup": float("nan")}], None).data == ()


@pytest.mark.parametrize(
    "ratio,label",
    [(1.8, "1.8× faster"), (0.7, "0.7× — a slowdown"), (0.97, "0.97× — a slowdown"),
     (1.02, "1.02× faster"), (1.0, "1.0× — same speed"), (2.345, "2.3× faster")],
)
def test_speedup_label(ratio, label):
    assert charts.speedup_label(ratio) == label


# --------------------------------------------------------------------------- lossless
def test_lossless_figure_groups_two_histograms_against_target_markers():
    fig = charts.lossless_figure([" the", " a", "\n"], [0.5, 0.3, 0.2], [0.52, 0.27, 0.21], [0.49, 0.31, 0.2])
    assert fig.layout.barmode == "group"
    spec, plain, target = trace(fig, "speculative"), trace(fig, "plain"), trace(fig, "target p")
    assert spec.type == plain.type == "bar" and target.type == "scatter" and target.mode == "markers"
    assert list(spec.y) == [0.52, 0.27, 0.21]
    assert list(plain.y) == [0.49, 0.31, 0.2]
    assert list(target.y) == [0.5, 0.3, 0.2]
    assert list(spec.x) == ["␣the", "␣a", "↵"]  # whitespace made visible


def test_lossless_figure_shows_p_draft_bars_when_given():
    """The draft's distribution, which the broken control case follows, beside the two histograms."""
    fig = charts.lossless_figure(["a", "b"], [0.6, 0.4], [0.6, 0.4], [0.6, 0.4], p_draft=[0.9, 0.1])
    draft = trace(fig, "p_draft (draft's p)")
    assert draft.type == "bar" and list(draft.y) == [0.9, 0.1]
    with pytest.raises(ValueError):
        charts.lossless_figure(["a", "b"], [0.6, 0.4], [0.6, 0.4], [0.6, 0.4], p_draft=[1.0])


def test_lossless_figure_keeps_tokens_with_the_same_text_apart():
    fig = charts.lossless_figure(["a", "a", ""], [0.4, 0.3, 0.3], [0.4, 0.3, 0.3], [0.4, 0.3, 0.3])
    labels = list(trace(fig, "speculative").x)
    assert len(set(labels)) == 3


def test_lossless_figure_rejects_mismatched_lengths():
    with pytest.raises(ValueError):
        charts.lossless_figure(["a", "b"], [0.5, 0.5], [1.0], [0.5, 0.5])


# --------------------------------------------------------------------------- per position, time split
def test_per_position_figure_shows_rates_and_the_constant_alpha_of_the_theory():
    a = analyse(ROUNDS, 4, 1.0)
    fig = charts.per_position_figure(a)
    bars = trace(fig, "accepted ÷ tested at position i (conditional)")
    assert list(bars.x) == [p.position for p in a.per_position if p.tested]
    assert list(bars.y) == pytest.approx([p.rate for p in a.per_position if p.tested])
    assert any(f"per-token α {a.alpha:.2f}" in t for t in annotation_texts(fig))
    assert len(charts.per_position_figure(None).data) == 0
    plain = charts.per_position_figure(analyse([make_round(0, 0, 0)], 0, 1.0))
    assert any("α is undefined" in t for t in annotation_texts(plain))


def test_a_long_runs_time_split_stacks_stepped_outlines_with_the_same_values():
    from specviz.figures.speedup import PlainBaseline

    rounds = [make_round(i, 4, i % 4) for i in range(charts.BARS_MAX_PASSES + 1)]
    for i, r in enumerate(rounds):
        r.index = i
    a = analyse(rounds, 4, 1.0, baseline=PlainBaseline(step_ms=15.0, tokens_per_s=10.0))
    fig = charts.time_split_figure(a)
    go.Figure(json.loads(fig.to_json()))
    assert {t.type for t in fig.data} == {"scatter"} and {t.stackgroup for t in fig.data} == {"time"}
    assert list(trace(fig, "verify pass").y) == [r.verify_ms for r in rounds]
    assert list(trace(fig, "draft").x) == [r.index + 1 for r in rounds]
    assert all(t.hovertemplate.startswith("pass %{x}") for t in fig.data)
    assert "one plain decoding step" in annotation_texts(fig)


def test_time_split_figure_stacks_draft_verify_and_other_against_the_plain_step():
    from specviz.figures.speedup import PlainBaseline

    a = analyse(ROUNDS, 4, 1.0, baseline=PlainBaseline(step_ms=15.0, tokens_per_s=10.0))
    fig = charts.time_split_figure(a)
    assert fig.layout.barmode == "stack"
    assert list(trace(fig, "verify pass").y) == [r.verify_ms for r in ROUNDS]
    assert list(trace(fig, "draft").y) == [r.draft_ms for r in ROUNDS]
    # Round index i is "verify pass i + 1" in the inspector: the chart says the same.
    assert list(trace(fig, "verify pass").x) == [r.index + 1 for r in ROUNDS]
    assert all(t.hovertemplate.startswith("pass %{x}") for t in fig.data)
    assert "one plain decoding step" in annotation_texts(fig)
    go.Figure(json.loads(fig.to_json()))  # valid when validated
    go.Figure(json.loads(charts.per_position_figure(a).to_json()))
    assert len(charts.time_split_figure(None).data) == 0


def test_no_chart_title_line_runs_past_a_third_of_the_page():
    """Plotly never wraps a title, and the Run tab's long titles were cut at the
    chart's right edge; they break into lines of at most charts.TITLE_LINE characters, and the
    top margin grows by the lines it adds (the chart keeps the one height its row shares)."""
    long = "Time per verify pass · plain step 123.4 ms, and a few more words to need a second line"
    layout = charts.chart_layout(long, "x")
    lines = layout["title"]["text"].split("<br>")
    assert len(lines) >= 2 and all(len(line) <= charts.TITLE_LINE for line in lines)
    assert " ".join(lines) == long
    short = charts.chart_layout("Short", "x")
    assert layout["margin"]["t"] == short["margin"]["t"] + charts.TITLE_LINE_PX * (len(lines) - 1)
    assert layout["height"] == short["height"] == charts.HEIGHT
