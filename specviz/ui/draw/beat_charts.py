"""Plotly figures of one verify pass played beat by beat (:mod:`specviz.ui.teach.beats`), and of the
accept/resample rule at one position: where p_target's mass comes from, and draws that close in
on it. Built from trace records only; colours are :mod:`specviz.ui.draw.palette`'s.

Each figure keeps its categories fixed over a pass (every drafted token has its slot from the
first beat on), so stepping changes bars' heights and colours, never the layout: no motion for
the eye to follow, only the change to notice.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import plotly.graph_objects as go

from specviz.figures.trace import token_label, visible_text
from specviz.core.records import ACCEPTED, BONUS, RESAMPLED, Round
from specviz.ui.teach.beats import DRAFT, RESIDUAL, TEST, Beat, PositionDistributions, depths, fmt, is_chain, total_variation
from specviz.ui.draw import palette
from specviz.ui.draw.charts import KIND_COLORS, PLAIN_COLOR, REJECTED, THEORY_COLOR, plotly_text

HEIGHT = 380
OTHER = "other tokens"
GREEN, RED, ORANGE = KIND_COLORS[ACCEPTED], KIND_COLORS[REJECTED], KIND_COLORS[RESAMPLED]
CURRENT = palette.CURRENT


def _label(text: str, token_id: int) -> str:
    return plotly_text(token_label(text, token_id))


def _layout(title: str, uirevision: str) -> dict:
    return {"template": "plotly_white", "height": HEIGHT, "uirevision": uirevision,
            "title": {"text": title, "x": 0.01, "xanchor": "left", "font": {"size": 14}},
            "margin": {"l": 50, "r": 20, "t": 70, "b": 40}, "font": {"size": 12},
            "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0.0, "font": {"size": 11}},
            "shapes": [], "annotations": []}


def node_labels(round_: Round) -> list[str]:
    """One label per drafted node: its number in the list, its text with whitespace made visible
    and (in a tree) its depth. Plain text (the guess's checkboxes show it as it is; a chart
    escapes it)."""
    chain, d = is_chain(round_), depths(round_)
    return [f"{i + 1}. {visible_text(t.text)}" + ("" if chain else f" (pos {d[i] + 1})")
            for i, t in enumerate(round_.drafted)]


def beat_figure(round_: Round, played: list[Beat], pass_label: str = "") -> go.Figure:
    """The pass as it stands after the last beat of ``played`` (the beats so far, in order).

    Draft beats: p_draft bars appear one by one. From the verify beat on: p_target beside p_draft
    at every position, the tested tokens coloured by verdict (green accepted, red rejected), the
    current one outlined; a test beat adds the number line 0..1 with the acceptance threshold
    min(1, p_target/p_draft) and the recorded u. The pass's own token (resample, bonus): the
    distribution it was drawn from, see :func:`final_figure`.

    Raises:
        ValueError: if ``played`` is empty.
    """
    if not played:
        raise ValueError("no beat played")
    beat = played[-1]
    if beat.kind not in (DRAFT, "verify", TEST):
        return final_figure(round_, beat, pass_label)
    labels = [plotly_text(label) for label in node_labels(round_)]
    shown = {b.node for b in played if b.kind == DRAFT}
    verified = any(b.kind == "verify" for b in played)
    verdicts = {b.node: b.accepted for b in played if b.kind == TEST}
    colors = [GREEN if verdicts.get(i) else RED if i in verdicts else PLAIN_COLOR for i in range(len(labels))]
    widths = [3 if i == beat.node else 0 for i in range(len(labels))]
    data = [{"type": "bar", "name": "p_draft (coloured by verdict)", "x": labels, "xaxis": "x", "yaxis": "y",
             "y": [t.p_draft if i in shown else None for i, t in enumerate(round_.drafted)],
             "marker": {"color": colors, "line": {"color": CURRENT, "width": widths}},
             "hovertemplate": "%{x}: p_draft = %{y:.4g}<extra></extra>"}]
    if verified:
        data.append({"type": "bar", "name": "p_target", "x": labels, "xaxis": "x", "yaxis": "y",
                     "y": [t.p_target for t in round_.drafted], "marker": {"color": THEORY_COLOR},
                     "hovertemplate": "%{x}: p_target = %{y:.4g}<extra></extra>"})
    stage = ("drafting" if not verified else "verify pass: every position scored at once" if beat.kind != TEST
             else f"test at position {beat.depth + 1}: green accepted, red rejected, outlined the one under test")
    layout = _layout(f"{pass_label}{stage}", "watch-pass")
    layout.update(barmode="group", bargap=0.25,
                  xaxis={"type": "category", "anchor": "y", "domain": [0, 1]},
                  yaxis={"domain": [0.38, 1.0], "range": [0, 1.05], "title": {"text": "probability"}},
                  xaxis2={"range": [0, 1], "anchor": "y2", "domain": [0, 1], "title": {"text": "u ~ Uniform(0, 1)"}},
                  yaxis2={"domain": [0.0, 0.16], "visible": False, "range": [-0.5, 0.5]})
    if beat.kind == TEST:
        data += _number_line(beat, layout)
    else:
        layout["annotations"].append({"text": "the tests come after the verify pass", "xref": "x2", "yref": "y2",
                                      "x": 0.5, "y": 0, "showarrow": False, "font": {"color": palette.NOTE_TEXT}})
    return go.Figure(data=data, layout=layout)


def _number_line(beat: Beat, layout: dict) -> list[dict]:
    """The test on the line 0..1: accept region [0, a), reject region [a, 1], and u."""
    a, u = float(beat.accept_prob), float(beat.uniform)
    # Regions as shapes, not bars: the bars above are grouped, and a grouped bar would shift here.
    for x0, x1, color, opacity in ((0.0, a, GREEN, 0.35), (a, 1.0, RED, 0.22)):
        layout["shapes"].append({"type": "rect", "xref": "x2", "yref": "y2", "x0": x0, "x1": x1, "y0": -0.3,
                                 "y1": 0.3, "fillcolor": color, "opacity": opacity, "line": {"width": 0}})
    regions = [{"type": "scatter", "mode": "markers", "x": [u], "y": [0], "xaxis": "x2", "yaxis": "y2",
                "name": "u", "marker": {"symbol": "diamond", "size": 16, "color": CURRENT},
                "hovertemplate": f"u = {fmt(u)}<extra></extra>"}]
    layout["annotations"] += [
        {"text": f"a = {fmt(a)}", "xref": "x2", "yref": "y2", "x": a, "y": 0.45, "showarrow": False,
         "font": {"color": GREEN, "size": 12}},
        {"text": f"u = {fmt(u)} → {'accepted' if beat.accepted else 'rejected'}", "xref": "x2", "yref": "y2",
         "x": u, "y": -0.45, "showarrow": False, "font": {"color": GREEN if beat.accepted else RED, "size": 12}},
    ]
    return regions


def final_figure(round_: Round, beat: Beat, pass_label: str = "") -> go.Figure:
    """The distribution the pass's own token came from: for a resample, p_target and p_draft at the
    rejected position beside the recorded residual normalize(max(0, p_target − p_draft)); for a
    bonus or plain token, p_target. The drawn token is starred. Only the trace's top tokens exist."""
    last = round_.emitted[-1] if round_.emitted else None
    layout = _layout(f"{pass_label}{beat.kind}: the pass emits {beat.emitted} token(s)", "watch-final")
    layout.update(barmode="group", xaxis={"type": "category"}, yaxis={"title": {"text": "probability"}})
    if last is None or not last.top_source:
        layout["annotations"].append({"text": "no distribution recorded for this token", "xref": "paper",
                                      "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False})
        return go.Figure(layout=layout)
    series = []
    drafted = round_.drafted_for(len(round_.emitted) - 1) if beat.kind == RESIDUAL else None
    if drafted is not None:
        series += [("p_draft", PLAIN_COLOR, drafted.top_draft), ("p_target", THEORY_COLOR, drafted.top_target)]
    name = "residual, renormalised" if beat.kind == RESIDUAL else "p_target"
    series.append((name, ORANGE if beat.kind == RESIDUAL else KIND_COLORS[BONUS], last.top_source))
    ids = [int(i) for i, _, _ in last.top_source][:10]
    texts = {int(i): t for _, _, rows in series for i, t, _ in rows}
    labels = [("★ " if i == last.id else "") + _label(texts[i], i) for i in ids]
    data = []
    for name, color, rows in series:
        values = {int(i): float(p) for i, _, p in rows}
        data.append({"type": "bar", "name": name, "x": labels, "y": [values.get(i) for i in ids],
                     "marker": {"color": color}, "hovertemplate": f"%{{x}}: {name} = %{{y:.4g}}<extra></extra>"})
    return go.Figure(data=data, layout=layout)


def stack_figure(dists: PositionDistributions, title: str = "") -> go.Figure:
    """Where p_target's mass comes from at one position: min(p_draft, p_target) (kept when the draft
    is accepted) stacked under max(0, p_target − p_draft) (the residual's share, drawn after a
    rejection); each stack is exactly p_target. Leviathan et al. 2023, Theorem 3.5 (the proof's
    two terms)."""
    p_draft, p_target = dists.arrays()
    labels = [("★ " if i == dists.drafted_id else "") + _label(t, i) for i, t in zip(dists.ids, dists.texts)]
    labels.append(OTHER)
    kept, residual = np.minimum(p_draft, p_target), np.clip(p_target - p_draft, 0, None)
    layout = _layout(plotly_text(title or "accepted mass + residual mass = p_target"), "watch-stack")
    layout.update(barmode="stack", xaxis={"type": "category"}, yaxis={"title": {"text": "probability"}})
    data = [{"type": "bar", "name": "min(p_draft, p_target): accepted draft", "x": labels, "y": kept.tolist(),
             "marker": {"color": GREEN}, "hovertemplate": "%{x}: min = %{y:.4g}<extra></extra>"},
            {"type": "bar", "name": "max(0, p_target − p_draft): residual", "x": labels, "y": residual.tolist(),
             "marker": {"color": ORANGE}, "hovertemplate": "%{x}: residual mass = %{y:.4g}<extra></extra>"},
            {"type": "scatter", "mode": "markers", "name": "p_target", "x": labels, "y": p_target.tolist(),
             "marker": {"symbol": "line-ew-open", "size": 22, "color": THEORY_COLOR, "line": {"width": 3}},
             "hovertemplate": "%{x}: p_target = %{y:.4g}<extra></extra>"},
            {"type": "scatter", "mode": "markers", "name": "p_draft", "x": labels, "y": p_draft.tolist(),
             "marker": {"symbol": "x-thin-open", "size": 10, "color": PLAIN_COLOR, "line": {"width": 2}},
             "hovertemplate": "%{x}: p_draft = %{y:.4g}<extra></extra>"}]
    return go.Figure(data=data, layout=layout)


def draws_figure(dists: PositionDistributions, speculative: np.ndarray, control: np.ndarray) -> go.Figure:
    """Frequencies of simulated draws at one position (:func:`specviz.ui.teach.beats.simulate_draws`): the
    accept/resample rule beside "accept every draft", with p_target and p_draft marked. The title
    gives each histogram's total-variation distance to p_target."""
    p_draft, p_target = dists.arrays()
    n = int(speculative.sum())
    spec_f, ctrl_f = speculative / max(n, 1), control / max(int(control.sum()), 1)
    labels = [_label(t, i) for i, t in zip(dists.ids, dists.texts)] + [OTHER]
    tv_spec, tv_ctrl = total_variation(spec_f, p_target), total_variation(ctrl_f, p_target)
    layout = _layout(f"{n:,} draws · distance to p_target: speculative {tv_spec:.3f}, accept-every-draft "
                     f"{tv_ctrl:.3f}", "watch-draws")
    layout.update(barmode="group", xaxis={"type": "category"}, yaxis={"title": {"text": "frequency"}})
    data = [{"type": "bar", "name": "speculative (accept/resample)", "x": labels, "y": spec_f.tolist(),
             "marker": {"color": KIND_COLORS[BONUS]}, "hovertemplate": "%{x}: %{y:.4f}<extra></extra>"},
            {"type": "bar", "name": "accept every draft (control)", "x": labels, "y": ctrl_f.tolist(),
             "marker": {"color": PLAIN_COLOR}, "hovertemplate": "%{x}: %{y:.4f}<extra></extra>"},
            {"type": "scatter", "mode": "markers", "name": "p_target", "x": labels, "y": p_target.tolist(),
             "marker": {"symbol": "line-ew-open", "size": 22, "color": THEORY_COLOR, "line": {"width": 3}}},
            {"type": "scatter", "mode": "markers", "name": "p_draft", "x": labels, "y": p_draft.tolist(),
             "marker": {"symbol": "x-thin-open", "size": 10, "color": PLAIN_COLOR, "line": {"width": 2}}}]
    return go.Figure(data=data, layout=layout)


def empty_figure(note: str) -> go.Figure:
    """An empty figure of the same size with a grey note (nothing to show at this beat)."""
    layout = _layout("", "watch-empty")
    layout.update(xaxis={"visible": False}, yaxis={"visible": False})
    layout["annotations"].append({"text": note, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
                                  "showarrow": False, "font": {"size": 13, "color": palette.NOTE_TEXT}})
    return go.Figure(layout=layout)


def rule_figure(round_: Round, replay, pass_label: str = "") -> go.Figure:
    """The beat drawing of a pass replayed under another rule (:func:`specviz.diagnose.rule_replay.replay_rule`):
    the tested tokens' p_draft and p_target bars coloured by what the rule keeps (green kept, red
    not, grey where the "other tokens" bucket leaves it open), and the number line of the test that
    decided the pass, with the rule's acceptance probability (its low end) and the recorded u.

    Args:
        round_: the chain pass; replay: its :class:`~specviz.diagnose.rule_replay.RuleReplay`.
    """
    played, tests = [], []
    for s in replay.steps:
        t = round_.drafted[s.node]
        p_draft = t.p_draft
        if s.token_id != t.id:  # an argmax draft: its own probabilities
            p_draft = float(t.top_draft[0][2])
        played.append(Beat(DRAFT, s.node, s.node, s.token_id, s.text, p_draft, None, None, None, None, 0, ""))
        if s.kept is not None:
            tests.append(Beat(TEST, s.node, s.node, s.token_id, s.text, p_draft, s.accept[0], s.accept[0],
                              s.uniform, s.kept, 0, ""))
    shown = replace(round_, drafted=[replace(round_.drafted[s.node], id=s.token_id, text=s.text, p_draft=b.p_draft,
                                             p_target=_target_of(round_.drafted[s.node], s.token_id))
                                     for s, b in zip(replay.steps, played)])
    decisive = next((b for b in tests if not b.accepted), tests[-1] if tests else None)
    verify = Beat("verify", None, None, None, "", None, None, None, None, None, 0, "")
    played += [verify, *(b for b in tests if b is not decisive)]
    if decisive is not None and decisive.uniform is not None:
        return beat_figure(shown, [*played, decisive], pass_label)
    if decisive is not None:  # no number line to draw: the verdicts colour the bars, the last beat stays the verify
        played = [*played, decisive, verify]
    fig = beat_figure(shown, played, pass_label)
    note = ("no uniform: the rule decides by the target's top-k alone" if replay.rule == "relaxed-top-k"
            else "the other-tokens bucket leaves this test open")
    fig.update_layout(annotations=[{"text": note, "xref": "x2", "yref": "y2", "x": 0.5, "y": 0, "showarrow": False,
                                    "font": {"color": palette.NOTE_TEXT}}],
                      title={"text": f"{pass_label}green kept, red not kept under the rule"})
    return fig


def _target_of(token, token_id: int) -> float:
    """p_target of ``token_id`` at ``token``'s position (0 where the target's top list misses it)."""
    if token_id == token.id:
        return token.p_target
    return next((float(p) for i, _, p in token.top_target if int(i) == token_id), 0.0)
