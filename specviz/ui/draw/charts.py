"""Plotly figures of a run, built from plain data (trace records, floats), cheap to rebuild.

Every function returns a :class:`plotly.graph_objects.Figure` with the shared look (template
``plotly_white``, 300 px high, a fixed ``uirevision`` per chart so the user's zoom survives the
several rebuilds a second that a live run triggers). Every function accepts empty input and
returns an empty, titled figure with a "waiting for the first round" note; a run with no drafted
tokens (plain decoding) gets a note that the acceptance rate α is undefined.

Figures hold a handful of traces whatever the run's length (never one trace per token), so
building one costs a few milliseconds.

Colours come from :mod:`.palette`: :data:`KIND_COLORS` maps each token kind of
:mod:`specviz.figures.trace` (plus ``"rejected"`` for a rejected draft) to its colour.
"""

from __future__ import annotations

import functools
import math
import numbers
import textwrap

import plotly.graph_objects as go
import plotly.io as pio

from specviz.figures import theory
from specviz.figures.analysis import is_tree_round, running_acceptance
from specviz.figures.trace import token_label
from specviz.core.records import ACCEPTED, BONUS, PLAIN, RESAMPLED, Round
from specviz.ui.draw import palette
from specviz.ui.draw.escape import as_text
from specviz.ui.draw.palette import REJECTED

__all__ = [
    "KIND_COLORS",
    "REJECTED",
    "WAITING_TEXT",
    "alpha_figure",
    "inspector_figure",
    "lossless_figure",
    "plotly_text",
    "per_position_figure",
    "speedup_figure",
    "speedup_label",
    "time_split_figure",
    "tokens_per_pass_counts_figure",
    "tokens_per_pass_figure",
]

#: Token-kind colours (:data:`specviz.ui.draw.palette.TOKEN_COLOURS`), shared with the token view.
KIND_COLORS = palette.TOKEN_COLOURS

SPEC_COLOR = KIND_COLORS[BONUS]  # speculative run
PLAIN_COLOR = KIND_COLORS[PLAIN]  # plain decoding baseline
THEORY_COLOR = palette.THEORY  # closed-form predictions (always dashed / hollow)
MEAN_COLOR = palette.MEAN  # measured running means
SLOW_FILL = palette.SLOW_FILL  # region where speculative is slower than plain

HEIGHT = 300
WAITING_TEXT = "waiting for the first round…"
NO_DRAFTS_TEXT = "plain decoding: nothing drafted, so α is undefined"


# --------------------------------------------------------------------------- shared helpers
@functools.cache
def _template() -> dict:
    """The plotly_white template as a plain dict (looked up and validated once)."""
    return pio.templates["plotly_white"].to_plotly_json()


#: Characters of a title line: a chart a third of the page wide holds about this many at 14 px
#: (Plotly never wraps a title, so a longer one was cut at the chart's right edge).
TITLE_LINE = 44
#: Pixels each further title line takes from the plot area.
TITLE_LINE_PX = 18


def _title_lines(title: str) -> list[str]:
    """The title in lines of at most :data:`TITLE_LINE` characters, broken at spaces."""
    return textwrap.wrap(title, TITLE_LINE, break_long_words=False) or [""]


def chart_layout(title: str, uirevision: str, x_title: str = "", y_title: str = "") -> dict:
    lines = _title_lines(title)
    extra = TITLE_LINE_PX * (len(lines) - 1)
    return {
        "template": _template(),
        # Title on the first line(s), legend on the next, both above the plot area.
        "title": {"text": "<br>".join(lines), "x": 0.01, "xanchor": "left", "y": 0.985, "yanchor": "top",
                  "yref": "container", "font": {"size": 14}},
        "height": HEIGHT,  # one height for every chart, so a row of them lines up; the plot area gives way
        "margin": {"l": 50, "r": 20, "t": 62 + extra, "b": 40},
        "uirevision": uirevision,
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0.0,
                   "font": {"size": 11}},
        "font": {"size": 12},
        "xaxis": {"title": {"text": x_title}},
        "yaxis": {"title": {"text": y_title}},
        "shapes": [],
        "annotations": [],
    }


def build_figure(data: list[dict], layout: dict) -> go.Figure:
    """A Figure from plain dicts, skipping plotly's property validation.

    Validating the plotly_white template alone costs ~10 ms a figure, and these figures are
    rebuilt several times a second while a run goes on, in the process that also times it. The
    dicts here are fixed by this module and the tests rebuild every figure with validation on.
    """
    try:
        return go.Figure(data=data, layout=layout, _validate=False)
    except TypeError:  # a plotly without the private flag: validate, slower but correct
        return go.Figure(data=data, layout=layout)


def chart_note(layout: dict, text: str, y: float = 0.5) -> None:
    """A grey centred note in paper coordinates (empty figure, undefined quantity)."""
    layout["annotations"].append({"text": text, "xref": "paper", "yref": "paper", "x": 0.5, "y": y,
                                  "showarrow": False, "font": {"size": 13, "color": palette.NOTE_TEXT}})


def hline(layout: dict, y: float, color: str, text: str, dash: str = "solid", right: bool = False) -> None:
    """A horizontal line across the plot at data height y, labelled just above it."""
    layout["shapes"].append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": y, "y1": y,
                             "line": {"color": color, "dash": dash, "width": 1.5}})
    layout["annotations"].append({"text": text, "xref": "paper", "x": 1 if right else 0, "yref": "y", "y": y,
                                  "xanchor": "right" if right else "left", "yanchor": "bottom",
                                  "showarrow": False, "font": {"color": color, "size": 11}})


def vline(layout: dict, x: float, color: str, text: str, dash: str = "solid", left: bool = False) -> None:
    """A vertical line over the plot at data position x, labelled at the top."""
    layout["shapes"].append({"type": "line", "xref": "x", "x0": x, "x1": x, "yref": "paper", "y0": 0, "y1": 1,
                             "line": {"color": color, "dash": dash, "width": 1.5}})
    layout["annotations"].append({"text": text, "xref": "x", "x": x, "yref": "paper", "y": 1,
                                  "xanchor": "right" if left else "left", "yanchor": "top",
                                  "showarrow": False, "font": {"color": color, "size": 11}})


def waiting_figure(title: str, uirevision: str, x_title: str = "", y_title: str = "", note: str = WAITING_TEXT) -> go.Figure:
    layout = chart_layout(title, uirevision, x_title, y_title)
    chart_note(layout, note)
    layout["xaxis"]["showticklabels"] = False
    layout["yaxis"]["showticklabels"] = False
    return build_figure([], layout)


#: A label, tick, hover or annotation that holds text from outside the code (a token's text, a
#: drafter's name): Plotly reads those strings as a small HTML subset (``<b>``, ``<br>``, ``<a>``,
#: entities) and LaTeX between ``$``, so they go through the page's one rule,
#: :func:`specviz.ui.draw.escape.as_text`, whose character references Plotly turns back into the
#: characters themselves.
plotly_text = as_text


def _finite(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def speedup_label(ratio: float) -> str:
    """Human label of a speed ratio: ``"1.8× faster"``, ``"0.7× — a slowdown"``, ``"1.0× — same speed"``.

    One decimal, or two when one would round a ratio that is not exactly 1 to "1.0".
    """
    text = f"{ratio:.1f}"
    if text == "1.0" and ratio != 1.0:
        text = f"{ratio:.2f}"
    if ratio < 1.0:
        return f"{text}× — a slowdown"
    if ratio == 1.0:
        return f"{text}× — same speed"
    return f"{text}× faster"


# --------------------------------------------------------------------------- acceptance rate
def alpha_figure(rounds: list[Round]) -> go.Figure:
    """Acceptance per round (markers) and the run's running figures (lines).

    Markers: a round's acceptance rate, accepted / proposed; rounds that proposed nothing are
    skipped. Lines: the running acceptance rate and the running per-token α (accepted / *tested*,
    the α of the theory), both from :func:`specviz.figures.analysis.running_acceptance`, so their last
    values are the run's ``acceptance_rate`` and ``alpha``. x is the verify pass, counted from 1
    as the inspector, the hover text, the replay and the rounds CSV count it; y spans [0, 1.05].
    """
    title = "Acceptance per verify pass"
    uirev = "alpha"
    x_title, y_title = "verify pass", "accepted / proposed"
    if not rounds:
        return waiting_figure(title, uirev, x_title, y_title)

    xs, ys, custom = [], [], []
    for r in rounds:
        if r.drafted:
            xs.append(r.index + 1)
            ys.append(r.n_accepted / len(r.drafted))
            custom.append([r.n_accepted, len(r.drafted)])
    running = running_acceptance(rounds)
    mean_x = [index + 1 for index, _, _ in running]
    mean_y = [rate for _, rate, _ in running]
    hat_y = [alpha for _, _, alpha in running]
    if running:
        title = f"Acceptance · rate {mean_y[-1]:.2f}, per-token α {hat_y[-1]:.2f}"
    layout = chart_layout(title, uirev, x_title, y_title)
    layout["yaxis"]["range"] = [0.0, 1.05]
    if not running:
        chart_note(layout, NO_DRAFTS_TEXT)
        return build_figure([], layout)
    line_mode = "lines" if len(mean_x) > 1 else "lines+markers"
    data = [
        {"type": "scatter", "x": xs, "y": ys, "customdata": custom, "mode": "markers",
         "name": "acceptance rate this round", "marker": {"color": KIND_COLORS[ACCEPTED], "size": 7, "opacity": 0.7},
         "hovertemplate": "pass %{x}<br>%{customdata[0]}/%{customdata[1]} proposed drafts accepted<extra></extra>"},
        {"type": "scatter", "x": mean_x, "y": mean_y, "mode": line_mode,
         "name": "running acceptance rate", "line": {"color": MEAN_COLOR, "width": 2},
         "hovertemplate": "up to pass %{x}<br>accepted ÷ proposed = %{y:.3f}<extra></extra>"},
        {"type": "scatter", "x": mean_x, "y": hat_y, "mode": line_mode,
         "name": "per-token α (accepted ÷ tested: the theory's α)",
         "line": {"color": THEORY_COLOR, "width": 1.5, "dash": "dash"},
         "hovertemplate": ("up to pass %{x}<br>α = accepted ÷ tested = %{y:.3f}<br>drafts after a rejection "
                           "are never tested<extra></extra>")},
    ]
    return build_figure(data, layout)


# --------------------------------------------------------------------------- tokens per pass
def tokens_per_pass_figure(rounds: list[Round], k: int, alpha: float | None) -> go.Figure:
    """Observed distribution of tokens emitted per target pass against the theory.

    Bars: the fraction of rounds that emitted n tokens, n = 1 … K + 1 (more bins if some round
    emitted more, e.g. if ``k`` is smaller than the run's K). Markers/line: the closed form
    :func:`specviz.figures.theory.tokens_per_pass_distribution` at the run's per-token ``alpha``
    (:attr:`specviz.figures.analysis.RunAnalysis.alpha`, accepted / *tested* drafts), None when nothing was
    drafted.
    Vertical lines: the observed mean and the theoretical mean (1 − α^(K+1)) / (1 − α).

    Rounds that proposed fewer than K drafts (prompt lookup finding nothing, or the last rounds
    near the length limit) and rounds cut short by an EOS are counted as they are; the theory
    assumes K proposals every pass, which the hover says.

    Raises:
        ValueError: if ``k`` is not an integer >= 0.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"K must be an integer >= 0, got {k!r}")
    title = "Tokens emitted per target pass"
    uirev = "tokens_per_pass"
    x_title, y_title = "tokens emitted in one pass", "fraction of passes"
    if not rounds:
        return waiting_figure(title, uirev, x_title, y_title)
    passes_by_tokens: dict[int, int] = {}
    for r in rounds:
        passes_by_tokens[len(r.emitted)] = passes_by_tokens.get(len(r.emitted), 0) + 1
    return tokens_per_pass_counts_figure(passes_by_tokens, k, alpha, short=sum(1 for r in rounds if r.n_proposed < k),
                                         trees=sum(1 for r in rounds if is_tree_round(r)))


def tokens_per_pass_counts_figure(passes_by_tokens: dict[int, int], k: int, alpha: float | None, short: int = 0,
                                  trees: int = 0) -> go.Figure:
    """:func:`tokens_per_pass_figure` from counts: ``passes_by_tokens[n]`` passes emitted n tokens
    (an engine's histogram of a server's lifetime, more passes than records could hold); ``short``
    of them proposed fewer than K drafts, ``trees`` drafted a tree (both said in the theory's hover).

    Raises:
        ValueError: if ``k`` is not an integer >= 0, or a count is negative.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"K must be an integer >= 0, got {k!r}")
    if any(n < 0 or count < 0 for n, count in passes_by_tokens.items()):
        raise ValueError("passes_by_tokens must count passes (n >= 0 tokens, >= 0 passes)")
    title, uirev = "Tokens emitted per target pass", "tokens_per_pass"
    x_title, y_title = "tokens emitted in one pass", "fraction of passes"
    n_rounds = sum(passes_by_tokens.values())
    if not n_rounds:
        return waiting_figure(title, uirev, x_title, y_title)
    seen = [n for n, count in passes_by_tokens.items() if count]
    lo = min(1, min(seen))
    hi = max(k + 1, max(seen))
    bins = list(range(lo, hi + 1))
    hist = {n: passes_by_tokens.get(n, 0) for n in bins}
    fractions = [hist[n] / n_rounds for n in bins]
    observed_mean = sum(n * count for n, count in hist.items()) / n_rounds

    theory_mean = theory.expected_tokens_per_pass(alpha, k) if alpha is not None else None
    title = f"Tokens per pass · mean {observed_mean:.2f}"
    if theory_mean is not None:
        title += f" (theory {theory_mean:.2f}, α {alpha:.2f})"
    layout = chart_layout(title, uirev, x_title, y_title)
    layout["xaxis"].update(tickmode="linear", dtick=1, range=[lo - 0.6, hi + 0.6])
    layout["yaxis"].update(range=[0.0, 1.05], tickformat=".0%")

    data = [{
        "type": "bar", "x": bins, "y": fractions, "customdata": [hist[n] for n in bins], "name": "observed",
        "marker": {"color": SPEC_COLOR, "opacity": 0.75},
        "hovertemplate": "%{x} tokens in a pass: %{y:.1%} of passes (%{customdata} passes)<extra></extra>",
    }]
    if alpha is None:
        chart_note(layout, NO_DRAFTS_TEXT, y=0.8)
    else:
        dist = theory.tokens_per_pass_distribution(alpha, k)
        assumption = (f"theory assumes K = {k} proposals every pass,<br>"
                      f"each accepted with prob. α = accepted / tested drafts = {alpha:.3f}")
        if short:
            assumption += f"; {short} of {n_rounds} passes proposed fewer"
        if trees:
            assumption += (f"<br>a chain's formula: {trees} of {n_rounds} passes drafted a tree, whose siblings<br>"
                           "let the accepted path go deeper than a chain's at the same α")
        data.append({
            "type": "scatter", "x": list(range(1, k + 2)), "y": dist, "mode": "lines+markers",
            "name": f"theory (α = {alpha:.2f})",
            "line": {"color": THEORY_COLOR, "dash": "dash", "width": 1.5},
            "marker": {"color": THEORY_COLOR, "size": 8, "symbol": "diamond-open"},
            "hovertemplate": f"theory P(N = %{{x}}) = %{{y:.1%}}<br>{assumption}<extra></extra>",
        })
        # The label of the larger mean goes right of its line, the other's left: no overlap.
        vline(layout, theory_mean, THEORY_COLOR, f"theory {theory_mean:.2f}", dash="dash",
               left=theory_mean < observed_mean)
    vline(layout, observed_mean, MEAN_COLOR, f"mean {observed_mean:.2f}",
           left=theory_mean is not None and observed_mean <= theory_mean)
    return build_figure(data, layout)


# --------------------------------------------------------------------------- speedup
#: How the speedup and its range were measured, for the hover (one text, the chart's and the summary's).
SPEEDUP_HOW = ("speedup = this run's tokens/s ÷ plain decoding's over as many tokens (median of the timed plain "
               "runs)<br>range: the slowest and the fastest plain run, and this run's pass-to-pass variation")


#: The speedup chart's note when :func:`specviz.figures.speedup.speedup_doubt` doubts the run's speedup.
DOUBTED_TEXT = "not measurable now:<br>the plain baseline and this run's own timings<br>disagree (the summary says why)"


def speedup_figure(points: list[dict], theoretical: float | None, empty: str = WAITING_TEXT,
                   doubt: str | None = None) -> go.Figure:
    """Measured running speedup over time, with its range, against the theory and plain decoding.

    Args:
        points: ``{"t": seconds since the run started, "speedup": measured running speedup}``
            dicts in time order, optionally with ``"low"``/``"high"`` (its range) and ``"pass"``
            (the verify pass, from 1), as :func:`specviz.figures.speedup.running_speedup` gives them;
            points with a non-finite value are skipped.
        theoretical: predicted speedup (e.g. :func:`specviz.figures.theory.expected_speedup`), drawn as a
            dashed horizontal line, or None.
        empty: the note of a chart with no point (a loaded trace without a plain baseline says so).
        doubt: :func:`specviz.figures.speedup.speedup_doubt` of the run: when set, no line is drawn, only
            :data:`DOUBTED_TEXT` (a figure we cannot trust is not drawn either).

    The range is a shaded band around the measured line (the slowest and fastest plain run, and
    the run's pass-to-pass variation: :func:`specviz.figures.speedup.speedup_with_spread`), and the
    title gives the latest value with its range (:func:`specviz.figures.speedup.format_speedup`). The
    region below 1.0 (plain decoding's speed, a grey reference line) is shaded light red and
    labelled "slower than plain", so a slowdown reads as one.
    """
    from specviz.figures.speedup import format_speedup

    title = "Speedup over plain decoding"
    uirev = "speedup"
    x_title, y_title = "seconds since start", "speedup (×)"
    kept = [p for p in points if _finite(p.get("t")) and _finite(p.get("speedup"))]
    if doubt:
        return waiting_figure(title, uirev, x_title, y_title, DOUBTED_TEXT)
    if not kept:
        return waiting_figure(title, uirev, x_title, y_title, empty)
    xs = [float(p["t"]) for p in kept]
    ys = [float(p["speedup"]) for p in kept]
    banded = all(_finite(p.get("low")) and _finite(p.get("high")) for p in kept)
    lows = [float(p["low"]) for p in kept] if banded else ys
    highs = [float(p["high"]) for p in kept] if banded else ys
    passes = [p.get("pass", "?") for p in kept]
    theo = float(theoretical) if _finite(theoretical) else None

    title = f"Speedup · now {speedup_label(ys[-1])}"
    if banded and f"{lows[-1]:.2f}" != f"{highs[-1]:.2f}":
        title += f" · {format_speedup(ys[-1], lows[-1], highs[-1]).split(' ', 1)[1]}"
    layout = chart_layout(title, uirev, x_title, y_title)
    top = max([1.2, *ys, *highs] + ([theo] if theo is not None else [])) * 1.1
    layout["yaxis"]["range"] = [0.0, top]
    layout["shapes"].append({"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": 0.0, "y1": 1.0,
                             "fillcolor": SLOW_FILL, "line": {"width": 0}, "layer": "below"})
    layout["annotations"].append({"text": "slower than plain", "xref": "paper", "x": 0, "yref": "y", "y": 0.0,
                                  "xanchor": "left", "yanchor": "bottom", "showarrow": False,
                                  "font": {"color": KIND_COLORS[REJECTED], "size": 11}})
    hline(layout, 1.0, PLAIN_COLOR, "plain decoding")
    if theo is not None:
        hline(layout, theo, THEORY_COLOR, f"theory {theo:.2f}×", dash="dash", right=True)
    data = []
    if banded:
        data += [
            {"type": "scatter", "x": xs, "y": highs, "mode": "lines", "line": {"width": 0, "color": SPEC_COLOR},
             "showlegend": False, "hoverinfo": "skip", "name": "range (high)"},
            {"type": "scatter", "x": xs, "y": lows, "mode": "lines", "line": {"width": 0, "color": SPEC_COLOR},
             "fill": "tonexty", "fillcolor": palette.RANGE_FILL, "name": "range", "hoverinfo": "skip"},
        ]
    data.append({
        "type": "scatter", "x": xs, "y": ys, "customdata": [[n, lo, hi] for n, lo, hi in zip(passes, lows, highs)],
        "mode": "lines+markers" if len(xs) < 2 else "lines",
        "name": "measured", "line": {"color": SPEC_COLOR, "width": 2}, "marker": {"color": SPEC_COLOR},
        "hovertemplate": ("after pass %{customdata[0]}, t = %{x:.1f} s<br>speedup %{y:.2f}× "
                          "(%{customdata[1]:.2f}–%{customdata[2]:.2f}×)<br>" + SPEEDUP_HOW + "<extra></extra>"),
    })
    return build_figure(data, layout)


# --------------------------------------------------------------------------- lossless check
def _visible(label: str) -> str:
    """Make whitespace in a token's text visible on an axis."""
    if label == "":
        return "''"
    return label.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")


def lossless_figure(token_labels: list[str], p_target: list[float], freq_spec: list[float],
                    freq_plain: list[float], p_draft: list[float] | None = None) -> go.Figure:
    """Empirical next-token frequencies of speculative and plain sampling against the target's p.

    Grouped bars give the two empirical histograms over the top tokens; markers give the target
    distribution. If speculative sampling is lossless, both bars sit on the marker up to
    sampling noise. ``p_draft`` (optional, same bins) adds the draft's distribution as light
    bars: what a broken verify step that accepts every draft token reproduces (the control case).
    Whitespace in labels is made visible and duplicate labels are numbered (a categorical axis
    would merge them).

    Raises:
        ValueError: if the lists differ in length.
    """
    lengths = {len(token_labels), len(p_target), len(freq_spec), len(freq_plain)}
    if p_draft is not None:
        lengths.add(len(p_draft))
    if len(lengths) != 1:
        raise ValueError(
            "token_labels, p_target, freq_spec, freq_plain and p_draft must have the same length, got "
            f"{len(token_labels)}, {len(p_target)}, {len(freq_spec)}, {len(freq_plain)}"
            + ("" if p_draft is None else f", {len(p_draft)}")
        )
    title = "Is it lossless? Sampled frequencies vs target p"
    uirev = "lossless"
    x_title, y_title = "token", "probability / frequency"
    if not token_labels:
        return waiting_figure(title, uirev, x_title, y_title)

    p_target, freq_spec, freq_plain = ([float(v) for v in seq] for seq in (p_target, freq_spec, freq_plain))
    labels, seen = [], {}
    for raw in token_labels:
        label = plotly_text(_visible(raw))
        seen[label] = seen.get(label, 0) + 1
        labels.append(label if seen[label] == 1 else f"{label} ({seen[label]})")

    layout = chart_layout(title, uirev, x_title, y_title)
    layout.update(barmode="group", bargap=0.25)
    layout["yaxis"].update(rangemode="tozero", tickformat=".0%")
    layout["xaxis"]["type"] = "category"
    data = [
        {"type": "bar", "x": labels, "y": freq_spec, "name": "speculative", "marker": {"color": SPEC_COLOR},
         "hovertemplate": "%{x}: speculative %{y:.1%}<extra></extra>"},
        {"type": "bar", "x": labels, "y": freq_plain, "name": "plain", "marker": {"color": PLAIN_COLOR},
         "hovertemplate": "%{x}: plain %{y:.1%}<extra></extra>"},
        {"type": "scatter", "x": labels, "y": p_target, "mode": "markers", "name": "target p",
         "marker": {"color": THEORY_COLOR, "symbol": "diamond", "size": 10,
                    "line": {"color": palette.MARKER_EDGE, "width": 1}},
         "hovertemplate": "%{x}: target p = %{y:.1%}<extra></extra>"},
    ]
    if p_draft is not None:
        data.insert(2, {"type": "bar", "x": labels, "y": [float(v) for v in p_draft], "name": "p_draft (draft's p)",
                        "marker": {"color": palette.PREDICTED_FILL},
                        "hovertemplate": "%{x}: p_draft = %{y:.1%}<extra></extra>"})
    return build_figure(data, layout)


# --------------------------------------------------------------------------- per position
def per_position_figure(analysis, positions=None) -> go.Figure:
    """Acceptance at the i-th draft position of a round, i = 1..K, two ways.

    Bars: conditional acceptance, :attr:`specviz.figures.analysis.RunAnalysis.per_position` rates (accepted
    ÷ tested at that position; hover gives the counts), and, given ``positions``
    (:func:`specviz.diagnose.diagnostics.acceptance_by_position`), full acceptance beside it (accepted ÷
    drafting passes: the share of all passes that got past position i). Dashed line: the run's
    per-token α, the constant conditional rate Leviathan et al.'s model assumes at every position.
    Positions never tested have no bar.

    Args:
        analysis: a :class:`~specviz.figures.analysis.RunAnalysis`, or None before the first round.
        positions: the run's :class:`specviz.diagnose.diagnostics.PositionRates`, or None (conditional only).
    """
    title, uirev = "Acceptance by draft position: conditional (of tested) and full (of all passes)", "per_position"
    x_title, y_title = "draft position i in the round", "share accepted"
    if analysis is None or not analysis.target_passes:
        return waiting_figure(title, uirev, x_title, y_title)
    layout = chart_layout(title, uirev, x_title, y_title)
    layout["yaxis"]["range"] = [0.0, 1.05]
    tested = [p for p in analysis.per_position if p.tested]
    if not tested:
        chart_note(layout, NO_DRAFTS_TEXT)
        return build_figure([], layout)
    layout["xaxis"].update(tickmode="linear", dtick=1, range=[0.4, len(analysis.per_position) + 0.6])
    data = [{
        "type": "bar", "x": [p.position for p in tested], "y": [p.rate for p in tested],
        "customdata": [[p.accepted, p.tested] for p in tested], "name": "accepted ÷ tested at position i (conditional)",
        "marker": {"color": KIND_COLORS[ACCEPTED], "opacity": 0.8},
        "hovertemplate": "position %{x}: %{customdata[0]}/%{customdata[1]} tested drafts accepted "
                         "(%{y:.2f}, conditional)<extra></extra>",
    }]
    shown = [p for p in positions or () if p.tested and p.full is not None]
    if shown:
        data.append({
            "type": "bar", "x": [p.position for p in shown], "y": [p.full for p in shown],
            "customdata": [[p.accepted, p.drafting_passes] for p in shown],
            "name": "accepted ÷ all drafting passes (full)", "marker": {"color": THEORY_COLOR, "opacity": 0.7},
            "hovertemplate": "position %{x}: %{customdata[0]} of %{customdata[1]} drafting passes kept a draft here "
                             "(%{y:.2f}, full)<extra></extra>",
        })
        layout["barmode"] = "group"
    if analysis.alpha is not None:
        hline(layout, analysis.alpha, THEORY_COLOR, f"per-token α {analysis.alpha:.2f} (the theory: same at every i)",
               dash="dash", right=True)
    return build_figure(data, layout)


# --------------------------------------------------------------------------- time split
#: Past this many verify passes the time-per-pass chart stacks stepped outlines, not bars: the
#: browser draws each bar as its own SVG element, and a 256-token run's ~300 bars took about 250 ms
#: of the page's main thread in one task (BENCHMARKS.md, "What a streamed run costs the browser").
BARS_MAX_PASSES = 60


def time_split_figure(analysis) -> go.Figure:
    """Where each round's time went: drafting, the verify pass and everything else (ms, stacked),
    against one plain decoding step of the target; bars, or past :data:`BARS_MAX_PASSES` passes
    stacked steps (one path per part), the same values and hovers.

    A round that costs more than the tokens it emitted times the plain step is a round that lost
    time; the hover of each bar gives that comparison.

    Args:
        analysis: a :class:`~specviz.figures.analysis.RunAnalysis`, or None before the first round.
    """
    title, uirev = "Time per verify pass", "time_split"
    x_title, y_title = "verify pass", "ms"
    if analysis is None or not analysis.time_split:
        return waiting_figure(title, uirev, x_title, y_title)
    split = analysis.time_split
    xs = [t.round + 1 for t in split]  # passes count from 1, as in the inspector and the rounds CSV
    plain = analysis.plain_step_ms
    if plain:
        title = f"Time per verify pass · plain step {plain:.1f} ms"
    layout = chart_layout(title, uirev, x_title, y_title)
    layout["barmode"] = "stack"
    parts = (("draft", "draft_ms", KIND_COLORS[RESAMPLED]), ("verify pass", "verify_ms", SPEC_COLOR),
             ("everything else", "other_ms", PLAIN_COLOR))
    if len(split) <= BARS_MAX_PASSES:
        data = [{"type": "bar", "x": xs, "y": [getattr(t, attr) for t in split], "name": name,
                 "marker": {"color": color},
                 "hovertemplate": f"pass %{{x}}: {name} %{{y:.1f}} ms<extra></extra>"} for name, attr, color in parts]
    else:  # a long run: one stepped, stacked outline per part instead of a bar per pass and part
        data = [{"type": "scatter", "mode": "lines", "x": xs, "y": [getattr(t, attr) for t in split], "name": name,
                 "stackgroup": "time", "line": {"shape": "hvh", "width": 0.5, "color": color}, "fillcolor": color,
                 "hovertemplate": f"pass %{{x}}: {name} %{{y:.1f}} ms<extra></extra>"} for name, attr, color in parts]
    if plain:
        hline(layout, plain, MEAN_COLOR, "one plain decoding step", dash="dot")
    return build_figure(data, layout)


# --------------------------------------------------------------------------- the inspector
def _bar_rows(rows: list, extra: dict[int, tuple[str, float]]) -> dict[int, tuple[str, float]]:
    out = {int(i): (text, float(p)) for i, text, p in rows}
    for i, value in extra.items():
        out.setdefault(i, value)
    return out


def inspector_figure(round_: Round, slot: int) -> go.Figure:
    """The distributions behind one decision (the token inspector's chart).

    For a drafted position (accepted, or rejected then resampled): grouped bars of the top tokens
    under p_draft and p_target there (the drafted token always included, marked with a star); for
    a rejection also the normalised residual max(0, p_target − p_draft) it was resampled from,
    with the resampled token marked. For a bonus or plain token: the p_target row it was drawn
    from. Bars come from the trace's top-token lists (``DraftedToken.top_draft``/``top_target``,
    ``EmittedToken.top_source``): the distributions actually used, after temperature, top-k and
    top-p; a token outside a list has no bar for it.

    Raises:
        IndexError: if ``slot`` is not a slot of the round.
    """
    tok = round_.emitted[slot]
    drafted = round_.drafted_for(slot)
    series = []
    if drafted is not None:
        mark = {drafted.id: (drafted.text, drafted.p_draft)}
        series.append(("p_draft", KIND_COLORS[PLAIN], _bar_rows(drafted.top_draft, mark)))
        mark = {drafted.id: (drafted.text, drafted.p_target)}
        series.append(("p_target", THEORY_COLOR, _bar_rows(drafted.top_target, mark)))
    if tok.kind != ACCEPTED:
        name = "residual (normalised)" if tok.kind == RESAMPLED else "p_target"
        extra = {tok.id: (tok.text, tok.p_source)} if tok.p_source is not None else {}
        series.append((name, KIND_COLORS[tok.kind], _bar_rows(tok.top_source, extra)))
    title = f"Pass {round_.index + 1}, token {slot + 1}: the distributions behind it"
    layout = chart_layout(title, "inspector", "token (text #id)", "probability")
    layout.update(barmode="group", bargap=0.2)
    layout["xaxis"]["type"] = "category"
    ids: list[int] = []
    for _, _, values in series:
        for i, _ in sorted(values.items(), key=lambda item: -item[1][1]):
            if i not in ids:
                ids.append(i)
    ids = ids[:14]
    texts = {i: t for _, _, values in series for i, (t, _) in values.items()}
    chosen = {tok.id} | ({drafted.id} if drafted is not None else set())
    labels = [("★ " if i in chosen else "") + plotly_text(token_label(texts[i], i)) for i in ids]
    if not series or not ids:
        chart_note(layout, "no distributions recorded for this token (an uninstrumented run)")
        return build_figure([], layout)
    data = [{"type": "bar", "x": labels, "y": [values[i][1] if i in values else None for i in ids], "name": name,
             "marker": {"color": color},
             "hovertemplate": f"%{{x}}: {name} = %{{y:.4f}}<extra></extra>"} for name, color, values in series]
    return build_figure(data, layout)


# --------------------------------------------------------------------------- the what-if playground
def playground_map_figure(alphas: list[float], ys: list[float], z: list[list[float]], y_name: str,
                          point: tuple[float, float] | None = None, title: str = "") -> go.Figure:
    """Expected speedup over a grid (α across, K or c up), with the slowdown region marked.

    Args:
        alphas: the α of each column, ascending.
        ys: the K (or c) of each row, ascending.
        z: ``z[i][j]`` the expected speedup at (alphas[j], ys[i]), e.g. from
            :func:`specviz.ui.teach.playground.speedup_grid`.
        y_name: ``"K"`` or ``"c"``: the row axis's name.
        point: the playground's current (α, K or c), drawn as a marker, or None.
        title: the figure's title (default: says what is plotted).

    The colour scale is white at 1 (plain decoding's speed): red cells are slowdowns, green cells
    speedups; a black contour traces speedup = 1, the break-even line.

    Raises:
        ValueError: if ``z`` does not have ``len(ys)`` rows of ``len(alphas)`` values.
    """
    if len(z) != len(ys) or any(len(row) != len(alphas) for row in z):
        raise ValueError(f"z must have {len(ys)} rows of {len(alphas)} values")
    layout = chart_layout(title or f"Expected speedup over (α, {y_name}) · red: slower than plain decoding",
                     f"playground_map_{y_name}", "per-token α", y_name)
    layout["height"] = 360
    top = max(2.0, max((max(row) for row in z), default=2.0))
    slower, even, faster = palette.SPEEDUP_SCALE
    # White exactly at speedup 1 on a 0..top scale: red below (slowdowns), green above.
    data = [
        {"type": "heatmap", "x": alphas, "y": ys, "z": z, "zmin": 0.0, "zmax": top,
         "colorscale": [[0.0, slower], [1.0 / top, even], [1.0, faster]],
         "colorbar": {"title": {"text": "speedup ×"}, "thickness": 12},
         "hovertemplate": (f"α = %{{x:.2f}}, {y_name} = %{{y}}<br>speedup = (1 − α^(K+1)) / ((1 − α)(K·c + v)) = "
                           "%{z:.2f}×<extra></extra>")},
        {"type": "contour", "x": alphas, "y": ys, "z": z, "showscale": False, "hoverinfo": "skip",
         "contours": {"start": 1.0, "end": 1.0, "size": 1.0, "coloring": "none", "showlabels": True},
         "line": {"color": MEAN_COLOR, "width": 2}, "name": "break-even (speedup = 1)"},
    ]
    if point is not None and all(_finite(v) for v in point):
        data.append({"type": "scatter", "x": [point[0]], "y": [point[1]], "mode": "markers",
                     "name": "your setting", "marker": {"color": palette.MARKER, "size": 12, "symbol": "x"},
                     "hovertemplate": f"your setting: α = %{{x:.2f}}, {y_name} = %{{y}}<extra></extra>"})
    return build_figure(data, layout)


def monte_carlo_figure(counts: list[int], theory_probs: list[float], simulated_mean: float,
                       closed_form_mean: float) -> go.Figure:
    """Simulated tokens per verify pass against the closed form's distribution.

    Args:
        counts: ``counts[n - 1]`` simulated passes that emitted n tokens, n = 1..K + 1
            (:attr:`specviz.ui.teach.playground.MonteCarlo.counts`).
        theory_probs: P(N = n) of :func:`specviz.figures.theory.tokens_per_pass_distribution`.
        simulated_mean, closed_form_mean: the two means, drawn as vertical lines.

    Raises:
        ValueError: if the two lists differ in length or no pass was simulated.
    """
    if len(counts) != len(theory_probs):
        raise ValueError(f"counts and theory_probs differ in length: {len(counts)} vs {len(theory_probs)}")
    total = sum(counts)
    if total <= 0:
        raise ValueError("no simulated passes")
    ns = list(range(1, len(counts) + 1))
    layout = chart_layout(f"Simulated tokens per pass · mean {simulated_mean:.3f} (closed form {closed_form_mean:.3f})",
                     "playground_mc", "tokens emitted in one pass", "fraction of passes")
    layout["xaxis"].update(tickmode="linear", dtick=1, range=[0.4, len(ns) + 0.6])
    layout["yaxis"].update(rangemode="tozero", tickformat=".0%")
    data = [
        {"type": "bar", "x": ns, "y": [c / total for c in counts], "customdata": counts, "name": "simulated",
         "marker": {"color": SPEC_COLOR, "opacity": 0.75},
         "hovertemplate": "%{x} tokens: %{y:.1%} of simulated passes (%{customdata})<extra></extra>"},
        {"type": "scatter", "x": ns, "y": theory_probs, "mode": "markers", "name": "closed form P(N = n)",
         "marker": {"color": THEORY_COLOR, "size": 9, "symbol": "diamond-open"},
         "hovertemplate": "P(N = %{x}) = α^(n−1)(1 − α), or α^K for K + 1: %{y:.1%}<extra></extra>"},
    ]
    vline(layout, closed_form_mean, THEORY_COLOR, f"closed form {closed_form_mean:.2f}", dash="dash",
           left=closed_form_mean < simulated_mean)
    vline(layout, simulated_mean, MEAN_COLOR, f"simulated {simulated_mean:.2f}",
           left=simulated_mean <= closed_form_mean)
    return build_figure(data, layout)


# --------------------------------------------------------------------------- experiments (sweeps)
#: What each sweep chart plots: (row key measured, row key of its theory or None, axis title).
SWEEP_METRICS = {
    "alpha": ("alpha", None, "per-token α (accepted ÷ tested)"),
    "tokens_per_pass": ("tokens_per_pass", "predicted_tokens_per_pass", "tokens per verify pass"),
    "speedup": ("speedup", "theoretical_speedup", "speedup over plain decoding (×)"),
}


def _above(high, low) -> float:
    """How far ``high`` lies above ``low`` (0 when either is missing): one whisker of a range."""
    return max(0.0, high - low) if _finite(high) and _finite(low) else 0.0


def sweep_figure(rows: list[dict], parameter: str, metric: str) -> go.Figure:
    """One measured figure of a sweep against the setting, with the theory for each point.

    Args:
        rows: sweep rows (:func:`specviz.run.sweep.sweep`), in the order run; may be empty.
        parameter: the varied setting, ``"temperature"``, ``"k"`` or ``"draft"`` (categorical).
        metric: ``"alpha"`` (with the acceptance rate, accepted ÷ proposed, beside it),
            ``"tokens_per_pass"`` (theory: (1 − α^(K+1)) / (1 − α) at the row's α) or
            ``"speedup"`` (theory: that ÷ (K·c + v) with the row's measured c and v; the region
            below 1 is shaded as a slowdown; whiskers: the row's speedup range, as the Run tab
            gives it).

    Raises:
        ValueError: for an unknown metric.
    """
    if metric not in SWEEP_METRICS:
        raise ValueError(f"metric must be one of {', '.join(SWEEP_METRICS)}, got {metric!r}")
    key, theory_key, y_title = SWEEP_METRICS[metric]
    x_title = {"temperature": "temperature", "k": "lookahead K", "draft": "drafter"}.get(parameter, parameter)
    title = f"{y_title} vs {x_title}"
    uirev = f"sweep_{metric}"
    if not rows:
        return waiting_figure(title, uirev, x_title, y_title)
    xs = [plotly_text(r.get(parameter)) if parameter == "draft" else r.get(parameter) for r in rows]
    layout = chart_layout(title, uirev, x_title, y_title)
    if parameter == "draft":
        layout["xaxis"]["type"] = "category"
    ys = [r.get(key) for r in rows]
    doubted = []
    if metric == "speedup":  # a doubted speedup is not drawn: a gap, and the words in its place
        from specviz.figures.speedup import speedup_doubts

        doubted = [x for x, doubt in zip(xs, speedup_doubts(rows)) if doubt]
        ys = [None if doubt else y for y, doubt in zip(ys, speedup_doubts(rows))]
    data = [{"type": "scatter", "x": xs, "y": ys, "mode": "lines+markers", "name": "measured",
             "line": {"color": SPEC_COLOR, "width": 2}, "marker": {"color": SPEC_COLOR, "size": 9},
             "hovertemplate": f"{x_title} %{{x}}: {y_title} = %{{y:.3f}} (measured)<extra></extra>"}]
    if metric == "speedup":  # the range the Run tab gives each speedup (slowest and fastest plain run)
        data[0]["error_y"] = {"type": "data", "symmetric": False, "color": SPEC_COLOR, "thickness": 1.5,
                              "array": [_above(r.get("speedup_high"), y) for y, r in zip(ys, rows)],
                              "arrayminus": [_above(y, r.get("speedup_low")) for y, r in zip(ys, rows)]}
        data[0]["hovertemplate"] = (f"{x_title} %{{x}}: {y_title} = %{{y:.3f}} (measured; whiskers: its "
                                    "range)<extra></extra>")
    if metric == "alpha":
        layout["yaxis"]["range"] = [0.0, 1.05]
        data.append({"type": "scatter", "x": xs, "y": [r.get("acceptance_rate") for r in rows],
                     "mode": "lines+markers", "name": "acceptance rate (accepted ÷ proposed)",
                     "line": {"color": MEAN_COLOR, "width": 1.5, "dash": "dot"}, "marker": {"color": MEAN_COLOR},
                     "hovertemplate": "%{x}: accepted ÷ proposed = %{y:.3f}<extra></extra>"})
    else:
        data.append({"type": "scatter", "x": xs, "y": [r.get(theory_key) for r in rows], "mode": "lines+markers",
                     "name": "theory at the measured α" + (", c, v" if metric == "speedup" else ""),
                     "line": {"color": THEORY_COLOR, "width": 1.5, "dash": "dash"},
                     "marker": {"color": THEORY_COLOR, "size": 9, "symbol": "diamond-open"},
                     "hovertemplate": ("%{x}: theory = %{y:.3f} — " + ("(1 − α^(K+1))/(1 − α)" if metric ==
                                       "tokens_per_pass" else "(1 − α^(K+1))/((1 − α)(K·c + v))") +
                                       "<extra></extra>")})
    if metric == "speedup":
        measured = [y for y in ys if _finite(y)] + [r.get(theory_key) for r in rows if _finite(r.get(theory_key))]
        layout["yaxis"]["range"] = [0.0, max([1.2, *measured]) * 1.1]
        layout["shapes"].append({"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": 0.0,
                                 "y1": 1.0, "fillcolor": SLOW_FILL, "line": {"width": 0}, "layer": "below"})
        hline(layout, 1.0, PLAIN_COLOR, "plain decoding (below: a slowdown)")
        for x in doubted:
            layout["annotations"].append({"text": "not measurable now<br>(see the table)", "x": x, "xref": "x",
                                          "y": 1.0, "yref": "y", "yanchor": "bottom", "showarrow": False,
                                          "font": {"color": KIND_COLORS[REJECTED], "size": 10}})
    return build_figure(data, layout)
