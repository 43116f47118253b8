"""Race lanes: plain decoding and a speculative run on one wall-clock axis, from measured timings.

The speculative lane lays the run's rounds end to end: each round's draft time (``Round.draft_ms``,
split into the share of the drafts that were accepted and the share wasted on rejected or never
tested drafts), then its verify pass (``Round.verify_ms``) and its bookkeeping (``Round.other_ms``).
The plain lane is what plain decoding would have spent on the same number of tokens: one step of
the measured baseline's ms per token (:class:`specviz.figures.speedup.PlainBaseline`). Each lane may
start with its prefill (``speculative_start_ms``, ``plain_start_ms``): the page passes
:func:`specviz.figures.speedup.race_clock`'s, the clock the headline's speedup uses, so plain finish ÷
speculative finish is the headline's figure. Times are milliseconds.

Waste is counted by the drafts' share: a round that drafted n tokens of which a were accepted
spent (n − a)/n of its draft time on guesses that were thrown away. (For a tree round n counts
every node drafted.)

:func:`race_lanes` is pure data (tested without plotly); :func:`race_figure` draws it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import plotly.graph_objects as go

from specviz.core.records import Round
from specviz.ui.draw import palette

__all__ = ["COLOURS", "Lanes", "Segment", "race_figure", "race_lanes", "stretch"]

#: The segments' colours by kind (Okabe–Ito, safe for colour-blind readers).
COLOURS = palette.RACE
LABELS = {"prefill": "prompt prefill and set-up", "draft": "drafting (accepted share)", "wasted": "drafting wasted on rejected drafts",
          "verify": "verify pass (target)", "other": "bookkeeping", "plain": "plain decoding step"}


@dataclass(frozen=True)
class Segment:
    """One bar of a lane: ``kind`` (a key of :data:`COLOURS`), ``start_ms`` and ``ms`` on the
    shared clock, the verify pass it belongs to (``pass_``, 1-based) and the tokens it emitted
    (``tokens``: set on the round's verify segment and on each plain step)."""

    kind: str
    start_ms: float
    ms: float
    pass_: int
    tokens: int = 0


@dataclass
class Lanes:
    """Both lanes of one run.

    Attributes:
        speculative: the speculative run's segments, in time order.
        plain: plain decoding's steps, one per token (``pass_`` is the speculative pass that
            emitted that token, so a stretch of passes maps to a stretch of plain steps).
        speculative_ms, plain_ms: where each lane finishes (ms), its prefill segment included.
        tokens: tokens emitted (the same in both lanes).
        step_ms: the plain baseline's step time (ms), None when the run has no baseline.
    """

    speculative: list[Segment] = field(default_factory=list)
    plain: list[Segment] = field(default_factory=list)
    speculative_ms: float = 0.0
    plain_ms: float = 0.0
    tokens: int = 0
    step_ms: float | None = None


def _round_segments(r: Round, t: float, pass_: int) -> list[Segment]:
    out = []
    drafted = r.n_proposed
    if r.draft_ms > 0 and drafted:
        kept = r.draft_ms * r.n_accepted / drafted
        out += [Segment("draft", t, kept, pass_), Segment("wasted", t + kept, r.draft_ms - kept, pass_)]
        t += r.draft_ms
    out.append(Segment("verify", t, r.verify_ms, pass_, tokens=len(r.emitted)))
    if r.other_ms > 0:
        out.append(Segment("other", t + r.verify_ms, r.other_ms, pass_))
    return [s for s in out if s.ms > 0 or s.kind == "verify"]


def race_lanes(rounds: Sequence[Round], step_ms: float | None, *, speculative_start_ms: float = 0.0,
               plain_start_ms: float = 0.0) -> Lanes:
    """The two lanes of ``rounds`` (a run's :class:`~specviz.core.records.Round` list) against plain
    decoding at ``step_ms`` per token (ms; None or ≤ 0 for no plain lane), each lane opening with a
    ``prefill`` segment (pass 0) of ``speculative_start_ms`` / ``plain_start_ms`` when above 0
    (:func:`specviz.figures.speedup.race_clock` gives all three as the headline counts them).

    Raises:
        ValueError: if a round has a negative time.
    """
    lanes = Lanes(step_ms=step_ms if step_ms and step_ms > 0 else None)
    t = max(float(speculative_start_ms or 0.0), 0.0)
    plain_t = max(float(plain_start_ms or 0.0), 0.0) if lanes.step_ms is not None else 0.0
    if t > 0:
        lanes.speculative.append(Segment("prefill", 0.0, t, 0))
    if plain_t > 0:
        lanes.plain.append(Segment("prefill", 0.0, plain_t, 0))
    for n, r in enumerate(rounds, start=1):
        if min(r.draft_ms, r.verify_ms, r.other_ms) < 0:
            raise ValueError(f"round {r.index} has a negative time")
        lanes.speculative += _round_segments(r, t, n)
        t += r.draft_ms + r.verify_ms + r.other_ms
        if lanes.step_ms is not None:
            for _ in r.emitted:
                lanes.plain.append(Segment("plain", plain_t + lanes.tokens * lanes.step_ms, lanes.step_ms, n,
                                           tokens=1))
                lanes.tokens += 1
        else:
            lanes.tokens += len(r.emitted)
    lanes.speculative_ms = t
    lanes.plain_ms = plain_t + lanes.tokens * lanes.step_ms if lanes.step_ms is not None else 0.0
    return lanes


def stretch(lanes: Lanes, first: int, last: int, lane: str = "speculative") -> tuple[float, float] | None:
    """The time span (start, end in ms) that passes ``first``…``last`` (1-based, inclusive)
    take in ``lane`` (``"speculative"`` or ``"plain"``), or None when none of them is there."""
    segments = [s for s in getattr(lanes, lane) if first <= s.pass_ <= last]
    if not segments:
        return None
    return segments[0].start_ms, segments[-1].start_ms + segments[-1].ms


#: Past this many segments in both lanes, each kind is drawn as one filled outline instead of one
#: bar per segment: the browser draws a bar as its own SVG element, and a 256-token run's ~650
#: bars took about 400 ms of the page's main thread in one task (BENCHMARKS.md, "What a streamed
#: run costs the browser"); one path per kind costs a few ms. A segment's own hover goes with it.
BARS_MAX_SEGMENTS = 160
#: Half the height of a lane's bars (the lanes sit at y = 0 and 1).
HALF_HEIGHT = 0.4


def _lit(segments: list[Segment], highlight: tuple[int, int] | None) -> list[bool]:
    return [highlight is None or highlight[0] <= s.pass_ <= highlight[1] for s in segments]


def _bars(fig, segments: list[Segment], row: int, highlight: tuple[int, int] | None) -> None:
    for kind in COLOURS:
        mine = [s for s in segments if s.kind == kind]
        if not mine:
            continue
        lit = _lit(mine, highlight)
        # One opacity for the trace when nothing is dimmed: the browser draws a per-bar array bar by bar.
        opacity = 1.0 if all(lit) else [1.0 if on else 0.3 for on in lit]
        fig.add_trace(go.Bar(
            y=[row] * len(mine), x=[s.ms for s in mine], base=[s.start_ms for s in mine], orientation="h",
            width=2 * HALF_HEIGHT, name=LABELS[kind],
            marker=dict(color=COLOURS[kind], opacity=opacity, line=dict(width=0.5, color=palette.MARKER_EDGE),
                        pattern_shape="/" if kind == "wasted" else ""),
            customdata=[[s.pass_, s.tokens] for s in mine],
            hovertemplate=f"{LABELS[kind]}<br>pass %{{customdata[0]}}<br>%{{base:.1f}} ms + %{{x:.2f}} ms"
                          "<extra></extra>"))


def _outlines(fig, segments: list[Segment], row: int, highlight: tuple[int, int] | None) -> None:
    """Each kind's segments as one filled path of rectangles (None between them), the dimmed
    ones (outside ``highlight``) as a second path of the same legend entry."""
    for kind in COLOURS:
        mine = [s for s in segments if s.kind == kind]
        if not mine:
            continue
        lit = _lit(mine, highlight)
        for on in (True, False):
            part = [s for s, is_lit in zip(mine, lit, strict=True) if is_lit == on]
            if not part:
                continue
            xs, ys = [], []
            for s in part:
                x0, x1, y0, y1 = s.start_ms, s.start_ms + s.ms, row - HALF_HEIGHT, row + HALF_HEIGHT
                xs += [x0, x1, x1, x0, x0, None]
                ys += [y0, y0, y1, y1, y0, None]
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines", fill="toself", fillcolor=COLOURS[kind], opacity=1.0 if on else 0.3,
                line=dict(width=0), name=LABELS[kind], legendgroup=kind, showlegend=on or all(not x for x in lit),
                hoveron="fills", hoverinfo="name"))


def race_figure(lanes: Lanes, highlight: tuple[int, int] | None = None):
    """The race as a Plotly figure: two horizontal lanes on a time axis (ms), each with a finish
    marker; ``highlight`` (first, last pass, 1-based) dims every other round and shades that
    stretch's span in both lanes."""
    fig = go.Figure()
    spec, plain = "speculative", "plain decoding"
    draw = _bars if len(lanes.speculative) + len(lanes.plain) <= BARS_MAX_SEGMENTS else _outlines
    draw(fig, lanes.speculative, 1, highlight)
    draw(fig, lanes.plain, 0, highlight)
    named: set[str] = set()
    for trace in fig.data:  # both lanes open with a prefill: one legend entry per kind
        if trace.showlegend is not False and trace.name in named:
            trace.showlegend = False
        named.add(trace.name)
    finishes = [(spec, 1, lanes.speculative_ms)] + ([(plain, 0, lanes.plain_ms)] if lanes.step_ms else [])
    finishes = [f for f in finishes if f[2] > 0]  # an empty race has no finish to mark ("finish 0 ms")
    fig.add_trace(go.Scatter(x=[ms for _, _, ms in finishes], y=[row for _, row, _ in finishes],
                             customdata=[lane for lane, _, _ in finishes], mode="markers+text",
                             marker=dict(symbol="line-ns-open", size=28, color=palette.MARKER, line=dict(width=3)),
                             text=[f"finish {ms:.0f} ms" for _, _, ms in finishes], textposition="top center",
                             name="finish", hovertemplate="%{customdata} finishes at %{x:.1f} ms<extra></extra>"))
    if highlight is not None:
        for lane, row in (("speculative", 1), ("plain", 0)):
            span = stretch(lanes, *highlight, lane=lane)
            if span:
                fig.add_shape(type="rect", x0=span[0], x1=span[1], y0=row - 0.45, y1=row + 0.45, layer="below",
                              fillcolor=palette.RACE_HIGHLIGHT, opacity=0.45, line_width=0)
    saved = (f"plain decoding would take {lanes.plain_ms:.0f} ms for the same {lanes.tokens} tokens"
             if lanes.step_ms else "no plain baseline to race against")
    fig.update_layout(barmode="overlay", height=260, margin=dict(l=10, r=10, t=40, b=40),
                      title=dict(text=f"Race on one clock: speculative {lanes.speculative_ms:.0f} ms; {saved}",
                                 font=dict(size=13)),
                      xaxis_title="time since the prompt was sent (ms; prefill included, as the headline)", legend=dict(orientation="h", y=-0.35),
                      # Numeric rows (plain 0, speculative 1), named by their ticks: the long-run
                      # outlines need coordinates inside a lane, which a category axis has not.
                      yaxis=dict(tickvals=[0, 1], ticktext=[plain, spec], range=[-0.6, 1.9], zeroline=False,
                                 showgrid=False))
    return fig
