"""What the numbers hide, drawn: a run's passes beside its synthetic twin, the health checks and
the oracle's ceiling, from plain data (:mod:`specviz.diagnose.twin`, :mod:`specviz.diagnose.health`,
:mod:`specviz.diagnose.ceiling`). No gradio, no torch.

The twin figure has five panels: the real run's accepted drafts per pass, pass after pass, beside
one seeded run of its i.i.d. twin over the same draft lengths (:func:`specviz.diagnose.twin.simulate_accepts`:
bursts and streaks show there); then the four figures the twin models (accepted drafts per pass,
conditional acceptance by position, the zero-accept share, run lengths of accepts), each real
against the i.i.d. twin at the run's α and the engines' constant-length twin.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.diagnose.health import Health
from specviz.diagnose.twin import SyntheticTwin, simulate_accepts
from specviz.ui.draw import palette
from specviz.ui.draw.charts import KIND_COLORS
from specviz.ui.draw.escape import as_text

__all__ = ["TWIN_SEED", "numbers_hide_markdown", "twin_figure"]

#: The seed of the twin's simulated run drawn beside the real passes (fixed: the same run draws
#: the same twin every time).
TWIN_SEED = 0
REAL_COLOR = KIND_COLORS["accepted"]
IID_COLOR = palette.THEORY
CONSTANT_COLOR = palette.MEAN
TITLE = "The run beside its synthetic twin (i.i.d. acceptance at the run's own α)"


def _empty(note: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(template="plotly_white", title={"text": TITLE, "font": {"size": 14}}, height=300,
                      annotations=[{"text": note, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
                                    "showarrow": False, "font": {"size": 13, "color": palette.NOTE_TEXT}}],
                      xaxis={"visible": False}, yaxis={"visible": False})
    return fig


def twin_figure(twin: SyntheticTwin | None, per_pass: list[int] | None = None, depths: list[int] | None = None
                ) -> go.Figure:
    """The five panels of the module docstring.

    Args:
        twin: the run's :class:`~specviz.diagnose.twin.SyntheticTwin` (None: before a run).
        per_pass: drafts kept by each drafting pass, in order.
        depths: each drafting pass's draft depth (the twin's simulated run drafts the same).
    """
    if twin is None or twin.iid is None:
        return _empty("Press Run: the twin is drawn when a run with drafts has finished." if twin is None
                      else as_text(twin.sentence))
    fig = make_subplots(rows=2, cols=4, specs=[[{"colspan": 4}, None, None, None], [{}, {}, {}, {}]],
                        vertical_spacing=0.2, horizontal_spacing=0.07,
                        subplot_titles=("drafts kept, pass by pass: the run and one run of its twin",
                                        "drafts kept per pass", "acceptance by position", "zero-accept passes",
                                        "runs of accepts"))
    _passes_panel(fig, twin, per_pass or [], depths or [])
    _histogram_panel(fig, twin)
    _positions_panel(fig, twin)
    _zero_panel(fig, twin)
    _runs_panel(fig, twin)
    fig.update_layout(template="plotly_white", height=560, margin={"l": 50, "r": 20, "t": 90, "b": 40},
                      title={"text": f"{TITLE}: α = {twin.alpha:.2f}, constant-length p = {twin.constant_p:.2f}",
                             "font": {"size": 14}, "x": 0.01},
                      legend={"orientation": "h", "y": 1.1, "x": 0.0, "font": {"size": 11}}, uirevision="twin",
                      barmode="group")
    return fig


def _passes_panel(fig, twin: SyntheticTwin, per_pass: list[int], depths: list[int]) -> None:
    simulated = simulate_accepts(twin.alpha, depths, TWIN_SEED)
    x = list(range(1, len(per_pass) + 1))
    fig.add_trace(go.Scatter(x=x, y=per_pass, mode="lines+markers", name="this run", line={"color": REAL_COLOR},
                             legendgroup="real"), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=simulated, mode="lines+markers", name=f"i.i.d. twin at α = {twin.alpha:.2f}",
                             line={"color": IID_COLOR, "dash": "dot"}, legendgroup="iid"), row=1, col=1)
    fig.update_xaxes(title_text="drafting pass", row=1, col=1)
    fig.update_yaxes(title_text="drafts kept", row=1, col=1)


def _three(fig, x, real, iid, constant, row, col) -> None:
    """The real figure as bars, the i.i.d. twin as hollow bars, the constant-length twin as markers."""
    fig.add_trace(go.Bar(x=x, y=real, name="this run", marker={"color": REAL_COLOR}, legendgroup="real",
                         showlegend=False), row=row, col=col)
    fig.add_trace(go.Bar(x=x, y=iid, name="i.i.d. twin", legendgroup="iid", showlegend=False,
                         marker={"color": IID_COLOR, "opacity": 0.45}), row=row, col=col)
    if constant is not None:
        fig.add_trace(go.Scatter(x=x, y=constant, mode="markers", name="constant-length twin (engines' form)",
                                 marker={"color": CONSTANT_COLOR, "symbol": "diamond", "size": 8},
                                 legendgroup="constant", showlegend=(row, col) == (2, 1)), row=row, col=col)


def _histogram_panel(fig, twin: SyntheticTwin) -> None:
    real = twin.real.accepted_length_histogram
    x = list(range(len(real)))
    _three(fig, x, real, twin.iid.accepted_length_histogram[: len(x)],
           twin.constant_length.accepted_length_histogram[: len(x)], 2, 1)
    fig.update_xaxes(title_text="drafts kept", row=2, col=1)
    fig.update_yaxes(title_text="passes", row=2, col=1)


def _positions_panel(fig, twin: SyntheticTwin) -> None:
    rates = twin.real.conditional_by_position
    x = [i + 1 for i, r in enumerate(rates) if r is not None]
    fig.add_trace(go.Scatter(x=x, y=[r for r in rates if r is not None], mode="lines+markers", showlegend=False,
                             line={"color": REAL_COLOR}, legendgroup="real"), row=2, col=2)
    for p, color, dash in ((twin.alpha, IID_COLOR, "dot"), (twin.constant_p, CONSTANT_COLOR, "dash")):
        fig.add_trace(go.Scatter(x=[1, max(x + [1])], y=[p, p], mode="lines", showlegend=False,
                                 line={"color": color, "dash": dash}), row=2, col=2)
    fig.update_xaxes(title_text="draft position", dtick=1, row=2, col=2)
    fig.update_yaxes(title_text="kept when tested", range=[0, 1.05], row=2, col=2)


def _zero_panel(fig, twin: SyntheticTwin) -> None:
    names = ["this run", "i.i.d.", "constant"]
    values = [twin.real.zero_accept_share, twin.iid.zero_accept_share, twin.constant_length.zero_accept_share]
    fig.add_trace(go.Bar(x=names, y=values, showlegend=False,
                         marker={"color": [REAL_COLOR, IID_COLOR, CONSTANT_COLOR]}), row=2, col=3)
    fig.update_yaxes(title_text="share of drafting passes", range=[0, 1], row=2, col=3)


def _runs_panel(fig, twin: SyntheticTwin) -> None:
    real, iid = twin.real.accept_run_lengths, twin.iid.accept_run_lengths
    width = max(len(real), len(iid))
    real, iid = real + [0.0] * (width - len(real)), iid + [0.0] * (width - len(iid))
    _three(fig, list(range(width)), real, iid, None, 2, 4)
    fig.update_xaxes(title_text="accepts before a rejection", row=2, col=4)
    fig.update_yaxes(title_text="runs", row=2, col=4)


def numbers_hide_markdown(twin: SyntheticTwin | None, health: Health | None, ceiling: str | None,
                          lessons: list[tuple[str, str]]) -> str:
    """The panel's text: the twin's verdict, every health check (⚠ found, ✓ not), the oracle's ceiling
    (for an oracle run) and the lessons filled with the run's numbers (``(title, text)`` pairs).
    Every sentence is escaped (:func:`as_text`): a loop's phrase is the model's text."""
    if twin is None and health is None:
        return "Press **Run**: after a run this panel shows its synthetic twin, its health checks and the lessons."
    parts = []
    if twin is not None:
        parts.append(f"**Synthetic twin.** {as_text(twin.sentence)}")
    if health is not None:
        lines = "\n".join(f"- {'⚠' if c.found else '✓'} **{c.name}**: {as_text(c.sentence)}" for c in health.checks)
        parts.append(f"**Health checks** (high α is not health)\n\n{lines}")
    if ceiling:
        parts.append(f"**The ceiling.** {as_text(ceiling)}")
    for title, text in lessons:
        parts.append(f"**Lesson: {as_text(title)}.** {as_text(text)}")
    return "\n\n".join(parts)
