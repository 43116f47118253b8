"""Plotly figures of the lossless↔lossy dial: the ensemble rule ``"ensemble:W"`` as W goes from 1
(exact) to 0 (every draft kept), acceptance against the measured distance of the output from
p_target, with the exact rules marked at distance 0.

* :func:`dial_draws_figure`: the first token of one prompt, drawn many times per W
  (:func:`specviz.ui.teach.dial.dial_draws`): measured α against the measured total-variation
  distance, beside the exact line the draws estimate and the sampling noise of as many direct draws.
* :func:`dial_passes_figure`: the last run's recorded passes replayed at each W
  (:func:`specviz.diagnose.rule_replay.ensemble_dial`): expected tokens per pass against the mean
  per-position distance, with the exact rules' tokens per pass on the same passes
  (:func:`specviz.diagnose.rule_replay.rules_on_passes`).

Same look as :mod:`.charts` (shared layout, a fixed ``uirevision`` per chart, a titled empty
figure with a note before there is anything to show).
"""

from __future__ import annotations

import plotly.graph_objects as go

from specviz.core.records import ACCEPTED, BONUS, RESAMPLED
from specviz.ui.draw import palette
from specviz.ui.draw.charts import KIND_COLORS, THEORY_COLOR, build_figure, chart_layout, chart_note, vline, waiting_figure

__all__ = ["DRAWS_TITLE", "PASSES_TITLE", "dial_draws_figure", "dial_passes_figure"]

DRAWS_TITLE = "Lossless ↔ lossy: first-token α against distance from p_target"
PASSES_TITLE = "Lossless ↔ lossy on the last run's passes: tokens per pass against distance"
#: The ensemble's measured points, and the exact rules' markers.
DIAL_COLOR = KIND_COLORS[RESAMPLED]
EXACT_COLOR = KIND_COLORS[ACCEPTED]
EXACT_RULE_COLORS = (KIND_COLORS[ACCEPTED], KIND_COLORS[BONUS], palette.MEAN, THEORY_COLOR)
NO_PASSES_TEXT = "needs a run whose drafted chains were recorded with their distributions: press Run first"


def _exact_markers(rules: dict[str, float], y_title: str) -> list[dict]:
    """One diamond per exact rule at distance 0 (they are lossless: their output is p_target's)."""
    return [{"type": "scatter", "mode": "markers", "x": [0.0], "y": [value], "name": f"{name} (exact)",
             "marker": {"symbol": "diamond", "size": 12, "color": EXACT_RULE_COLORS[i % len(EXACT_RULE_COLORS)],
                        "line": {"width": 1, "color": palette.MARKER_EDGE}},
             "hovertemplate": f"{name}: exact, distance 0, {y_title} %{{y:.3f}}<extra></extra>"}
            for i, (name, value) in enumerate(rules.items())]


def dial_draws_figure(report) -> go.Figure:
    """Measured first-token α (y) against the measured distance from p_target (x), one point per W.

    Args:
        report: a :class:`specviz.ui.teach.dial.DialReport`, or None before the dial has run.

    The points are the draws' own figures (``alpha``, ``distance`` of each
    :class:`~specviz.ui.teach.dial.DialDraw`); the dashed line joins the exact values they estimate
    (1 − W·TV, (1 − W)·binned TV); a vertical line marks the distance ``report.noise`` that as many
    direct draws from p_target show (a lossless rule's distance is that noise); diamonds mark the
    exact rules at distance 0.
    """
    x_title, y_title = "distance from p_target (total variation, binned)", "acceptance α"
    if report is None:
        return waiting_figure(DRAWS_TITLE, "dial-draws", x_title, y_title, note="press Trace the dial")
    layout = chart_layout(DRAWS_TITLE, "dial-draws", x_title, y_title)
    layout["yaxis"].update(range=[0, 1.05])
    layout["xaxis"].update(rangemode="tozero")
    draws = report.draws
    data = [
        {"type": "scatter", "mode": "lines", "x": [d.distance_exact for d in draws],
         "y": [d.alpha_exact for d in draws], "name": "exact (what the draws estimate)",
         "line": {"color": THEORY_COLOR, "dash": "dash"}, "hoverinfo": "skip"},
        {"type": "scatter", "mode": "markers+text", "x": [d.distance for d in draws], "y": [d.alpha for d in draws],
         "text": [f"w={d.weight:g}" for d in draws], "textposition": "top center",
         "name": f"ensemble, {report.n} draws per w", "marker": {"color": DIAL_COLOR, "size": 9},
         "customdata": [[d.weight, d.p_value] for d in draws],
         "hovertemplate": ("w = %{customdata[0]:g}: α %{y:.3f}, distance %{x:.4f}, chi-square p-value "
                           "%{customdata[1]:.3g}<extra></extra>")},
        *_exact_markers(report.exact_rules, "α"),
    ]
    vline(layout, report.noise, palette.NOTE_TEXT, f"noise of {report.n} direct draws", dash="dot")
    return build_figure(data, layout)


def dial_passes_figure(points, exact_rules: dict[str, float] | None = None) -> go.Figure:
    """Expected tokens per pass (y) against the mean per-position distance (x) of the ensemble rule
    at each W on the last run's recorded passes, whiskers for the range the trace's top-10 lists
    leave open.

    Args:
        points: :class:`specviz.diagnose.rule_replay.DialPoint` list, or None when there is nothing recorded.
        exact_rules: the exact rules' expected tokens per pass on the same passes (the midpoint of
            :func:`specviz.diagnose.rule_replay.rules_on_passes`' range), drawn at distance 0.
    """
    x_title, y_title = "mean distance from p_target per position (total variation)", "tokens per pass"
    if points is None:
        return waiting_figure(PASSES_TITLE, "dial-passes", x_title, y_title, note=NO_PASSES_TEXT)
    layout = chart_layout(PASSES_TITLE, "dial-passes", x_title, y_title)
    layout["yaxis"].update(rangemode="tozero")
    layout["xaxis"].update(rangemode="tozero")
    xs = [(p.distance[0] + p.distance[1]) / 2 for p in points]
    ys = [(p.tokens_per_pass[0] + p.tokens_per_pass[1]) / 2 for p in points]
    data = [{
        "type": "scatter", "mode": "lines+markers+text", "x": xs, "y": ys,
        "text": [f"w={p.weight:g}" for p in points], "textposition": "top center",
        "name": "ensemble on the recorded passes", "line": {"color": DIAL_COLOR}, "marker": {"size": 8},
        "error_x": {"type": "data", "symmetric": False, "array": [p.distance[1] - x for p, x in zip(points, xs)],
                    "arrayminus": [x - p.distance[0] for p, x in zip(points, xs)], "color": palette.MEAN},
        "error_y": {"type": "data", "symmetric": False,
                    "array": [p.tokens_per_pass[1] - y for p, y in zip(points, ys)],
                    "arrayminus": [y - p.tokens_per_pass[0] for p, y in zip(points, ys)], "color": palette.MEAN},
        "customdata": [[p.weight, p.accept[0], p.accept[1]] for p in points],
        "hovertemplate": ("w = %{customdata[0]:g}: %{y:.3f} tokens per pass, distance %{x:.4f}, conditional α "
                          "%{customdata[1]:.3f}–%{customdata[2]:.3f}<extra></extra>"),
    }, *_exact_markers(exact_rules or {}, "tokens per pass")]
    if not points:
        chart_note(layout, NO_PASSES_TEXT)
    return build_figure(data, layout)
