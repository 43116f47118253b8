"""Plotly figures of a run's diagnostics (:mod:`specviz.diagnose.diagnostics`): the verification rules
replayed on the recorded passes, the accepted-length histogram and the draft's calibration.

Same look and conventions as :mod:`.charts` (shared layout, a fixed ``uirevision`` per chart, an
empty titled figure with a note before the first round); every number comes from one
:class:`specviz.diagnose.diagnostics.RunDiagnostics` figure, and every title says what it is and how it was
measured.
"""

from __future__ import annotations

import plotly.graph_objects as go

from specviz.diagnose.diagnostics import RULES, RunDiagnostics
from specviz.core.records import ACCEPTED, BONUS, RESAMPLED
from specviz.ui.draw import palette
from specviz.ui.draw.charts import (
    KIND_COLORS,
    THEORY_COLOR,
    WAITING_TEXT,
    build_figure,
    hline,
    chart_layout,
    chart_note,
    waiting_figure,
)

__all__ = ["accepted_length_figure", "calibration_figure", "rules_figure"]

#: One colour per rule, in :data:`specviz.diagnose.diagnostics.RULES` order.
RULE_COLORS = {"full": KIND_COLORS[ACCEPTED], "one-hot": KIND_COLORS[BONUS], "exact-match": palette.MEAN,
               "block": KIND_COLORS[RESAMPLED]}
NO_RECORD_TEXT = "needs drafted chains recorded with their distributions"


def rules_figure(d: RunDiagnostics | None) -> go.Figure:
    """The same recorded passes under each rule: expected tokens per pass (bars) with the range
    the trace's "other tokens" bucket leaves open (error bars from low to high, drawn at the
    midpoint), beside what the run measured under the rule it ran (dashed line).

    From :func:`specviz.diagnose.diagnostics.rules_on_passes`: per pass, full Σ min(p_target, p_draft) at each
    position, one-hot and exact-match p_target(argmax p_draft), block verification Sun et al.'s
    P(τ ≥ i) on the pass's own drafts; tokens = 1 + Σ_i P(reach i), averaged over the passes.
    """
    title, uirev = "Same passes, four rules: expected tokens per pass", "rules"
    if d is None:
        return waiting_figure(title, uirev, "verification rule", "tokens per pass")
    layout = chart_layout(title, uirev, "verification rule", "expected tokens per pass")
    on = d.rules
    if on is None:
        chart_note(layout, NO_RECORD_TEXT)
        return build_figure([], layout)
    values = [on.rules[name].tokens_per_pass for name in RULES]
    mids = [(lo + hi) / 2 for lo, hi in values]
    data = [{
        "type": "bar", "x": list(RULES), "y": mids, "name": "expected tokens per pass",
        "marker": {"color": [RULE_COLORS[name] for name in RULES]},
        "error_y": {"type": "data", "symmetric": False, "array": [hi - m for (_, hi), m in zip(values, mids)],
                    "arrayminus": [m - lo for (lo, _), m in zip(values, mids)], "color": palette.MEAN},
        "customdata": [[lo, hi] for lo, hi in values],
        "hovertemplate": ("%{x}: between %{customdata[0]:.3f} and %{customdata[1]:.3f} tokens per pass (the range "
                          "the top-10 tokens a trace keeps leave open), over " f"{on.passes} passes<extra></extra>"),
    }]
    layout["yaxis"]["rangemode"] = "tozero"
    layout["title"]["text"] = f"Same {on.passes} passes, four rules: tokens per pass (whiskers: top-10 range)"
    hline(layout, on.measured_tokens_per_pass, THEORY_COLOR,
           f"this run, measured: {on.measured_tokens_per_pass:.2f}", dash="dash", right=True)
    return build_figure(data, layout)


def accepted_length_figure(d: RunDiagnostics | None) -> go.Figure:
    """Drafting passes by how many drafts they kept, 0..K, the target's own token not counted
    (vLLM's ``acceptance_histogram`` units; :func:`specviz.diagnose.diagnostics.accepted_length_histogram`).
    The bar at 0 is the zero-accept share's passes."""
    title, uirev = "Accepted drafts per pass (bonus not counted)", "accepted_lengths"
    x_title, y_title = "drafts kept in the pass", "passes"
    if d is None:
        return waiting_figure(title, uirev, x_title, y_title)
    layout = chart_layout(title, uirev, x_title, y_title)
    counts = d.accepted_length_histogram
    if not sum(counts):
        chart_note(layout, "nothing drafted: no accepted lengths")
        return build_figure([], layout)
    if d.zero_accept_share is not None:
        layout["title"]["text"] = f"{title} · {d.zero_accept_share:.0%} of drafting passes kept none"
    layout["xaxis"].update(tickmode="linear", dtick=1)
    total = sum(counts)
    data = [{"type": "bar", "x": list(range(len(counts))), "y": counts, "name": "drafting passes",
             "customdata": [n / total for n in counts], "marker": {"color": KIND_COLORS[ACCEPTED], "opacity": 0.8},
             "hovertemplate": "%{y} passes kept %{x} drafts (%{customdata:.1%} of drafting passes)<extra></extra>"}]
    return build_figure(data, layout)


def calibration_figure(d: RunDiagnostics | None) -> go.Figure:
    """The draft's confidence against how often it was kept: tested drafts binned by p_draft of the
    drafted token (:func:`specviz.diagnose.diagnostics.calibration`), the share accepted in each bin (markers
    sized by count), the mean acceptance probability the test used (hollow), and the diagonal."""
    title, uirev = "Calibration: p_draft of the drafted token vs how often it was kept", "calibration"
    x_title, y_title = "p_draft of the drafted token (bin)", "accepted ÷ tested in the bin"
    if d is None:
        return waiting_figure(title, uirev, x_title, y_title, WAITING_TEXT)
    layout = chart_layout(title, uirev, x_title, y_title)
    layout["xaxis"]["range"] = [0.0, 1.0]
    layout["yaxis"]["range"] = [0.0, 1.05]
    bins = d.calibration
    if not bins:
        chart_note(layout, "needs drafted tokens recorded with their probabilities")
        return build_figure([], layout)
    biggest = max(b.tested for b in bins)
    data = [
        {"type": "scatter", "mode": "lines", "x": [0, 1], "y": [0, 1], "name": "kept as often as p_draft says",
         "line": {"color": THEORY_COLOR, "dash": "dot"}, "hoverinfo": "skip"},
        {"type": "scatter", "mode": "markers", "x": [b.mean_p_draft for b in bins], "y": [b.accepted_rate for b in bins],
         "name": "accepted ÷ tested", "customdata": [[b.low, b.high, b.tested] for b in bins],
         "marker": {"color": KIND_COLORS[ACCEPTED], "size": [8 + 14 * b.tested / biggest for b in bins]},
         "hovertemplate": ("p_draft in [%{customdata[0]:.1f}, %{customdata[1]:.1f}): %{y:.2f} of %{customdata[2]} "
                           "tested drafts kept<extra></extra>")},
        {"type": "scatter", "mode": "markers", "x": [b.mean_p_draft for b in bins],
         "y": [b.mean_accept_prob for b in bins], "name": "mean acceptance probability of the test",
         "marker": {"color": THEORY_COLOR, "symbol": "circle-open", "size": 9},
         "hovertemplate": "mean min(1, p_target/p_draft) %{y:.2f}<extra></extra>"},
    ]
    return build_figure(data, layout)
