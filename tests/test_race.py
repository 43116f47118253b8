"""Race lanes: the speculative lane is the rounds' measured times end to end (draft split into
the accepted share and the wasted share, then the verify pass), the plain lane one baseline step
per emitted token, and a stretch of passes maps to a span in each lane."""

from __future__ import annotations

import pytest
from test_charts import make_round

from specviz.figures.speedup import PlainBaseline, race_clock
from specviz.ui.draw import race


def _rounds():
    # 4 drafts (4 ms each), 3 accepted → 16 ms drafting, 4 ms of it wasted; 4 tokens; verify 20 ms.
    a = make_round(0, 4, 3)
    b = make_round(1, 4, 4)  # all accepted: 5 tokens, nothing wasted
    b.other_ms = 1.5
    c = make_round(2, 0, 0)  # nothing drafted: a verify pass only
    return [a, b, c]


def test_the_speculative_lane_lays_rounds_end_to_end_with_the_waste_split_off():
    lanes = race.race_lanes(_rounds(), step_ms=15.0)
    kinds = [(s.kind, s.start_ms, s.ms, s.pass_) for s in lanes.speculative]
    assert kinds == [("draft", 0.0, 12.0, 1), ("wasted", 12.0, 4.0, 1), ("verify", 16.0, 20.0, 1),
                     ("draft", 36.0, 16.0, 2), ("verify", 52.0, 20.0, 2), ("other", 72.0, 1.5, 2),
                     ("verify", 73.5, 20.0, 3)]
    assert lanes.speculative_ms == pytest.approx(93.5)
    assert [s.tokens for s in lanes.speculative if s.kind == "verify"] == [4, 5, 1]


def test_the_plain_lane_is_one_baseline_step_per_token():
    lanes = race.race_lanes(_rounds(), step_ms=15.0)
    assert lanes.tokens == 10 and len(lanes.plain) == 10
    assert [s.start_ms for s in lanes.plain] == [15.0 * i for i in range(10)]
    assert lanes.plain_ms == pytest.approx(150.0)
    assert [s.pass_ for s in lanes.plain] == [1] * 4 + [2] * 5 + [3]


def test_no_baseline_no_plain_lane():
    lanes = race.race_lanes(_rounds(), step_ms=None)
    assert lanes.plain == [] and lanes.plain_ms == 0.0 and lanes.tokens == 10


def test_a_stretch_of_passes_is_a_span_in_each_lane():
    lanes = race.race_lanes(_rounds(), step_ms=15.0)
    assert race.stretch(lanes, 2, 2) == (36.0, 73.5)
    assert race.stretch(lanes, 2, 3, lane="plain") == (60.0, 150.0)
    assert race.stretch(lanes, 7, 9) is None


def test_negative_times_are_refused():
    r = make_round(0, 2, 1)
    r.verify_ms = -1.0
    with pytest.raises(ValueError, match="negative"):
        race.race_lanes([r], 10.0)


def test_a_long_run_draws_each_kind_as_one_outline_with_the_same_spans_and_the_stretch_dimmed():
    """Past BARS_MAX_SEGMENTS, one filled path per kind (two with a stretch: lit and dimmed) whose
    rectangles are exactly the segments, in the lane's row; the legend names each kind once."""
    import json

    import plotly.graph_objects as go

    rounds = []
    for i in range(60):
        r = make_round(i, 4, i % 5 if i % 5 < 4 else 4)
        r.index = i
        rounds.append(r)
    lanes = race.race_lanes(rounds, step_ms=15.0)
    assert len(lanes.speculative) + len(lanes.plain) > race.BARS_MAX_SEGMENTS
    fig = race.race_figure(lanes, highlight=(10, 19))
    go.Figure(json.loads(fig.to_json()))  # valid when validated
    assert not [t for t in fig.data if t.type == "bar"]
    for kind, lane, row in (("verify", lanes.speculative, 1), ("plain", lanes.plain, 0)):
        paths = [t for t in fig.data if t.name == race.LABELS[kind]]
        assert sorted(t.opacity for t in paths) == [0.3, 1.0]
        assert sum(t.showlegend for t in paths) == 1
        corners = [(x, y) for t in paths for x, y in zip(t.x, t.y, strict=True) if x is not None]
        rects = {(min(c[0] for c in corners[i:i + 5]), max(c[0] for c in corners[i:i + 5]))
                 for i in range(0, len(corners), 5)}
        want = {(s.start_ms, s.start_ms + s.ms) for s in lane if s.kind == kind}
        assert {(round(a, 6), round(b, 6)) for a, b in rects} == {(round(a, 6), round(b, 6)) for a, b in want}
        assert {y for _, y in corners} == {row - race.HALF_HEIGHT, row + race.HALF_HEIGHT}
    lit = next(t for t in fig.data if t.name == race.LABELS["verify"] and t.opacity == 1.0)
    assert len([x for x in lit.x if x is None]) == 10  # passes 10-19, one verify segment each
    assert len(fig.layout.shapes) == 2
    shown = [t.name for t in fig.data if t.showlegend is not False]
    assert len(shown) == len(set(shown))  # each kind once in the legend, the prefill of both lanes too


def test_the_figure_has_two_lanes_finish_markers_and_dims_outside_the_stretch():
    fig = race.race_figure(race.race_lanes(_rounds(), step_ms=15.0), highlight=(2, 2))
    bars = {t.name: t for t in fig.data if t.type == "bar"}
    assert set(bars) == {race.LABELS[k] for k in ("draft", "wasted", "verify", "other", "plain")}
    assert list(bars[race.LABELS["verify"]].marker.opacity) == [0.3, 1.0, 0.3]
    finish = next(t for t in fig.data if t.name == "finish")
    assert list(finish.x) == pytest.approx([93.5, 150.0])
    assert len(fig.layout.shapes) == 2  # the stretch shaded in both lanes
    assert race.race_figure(race.race_lanes([], None)).layout.title.text.startswith("Race")


def test_the_race_lanes_of_the_last_run_go_when_run_is_pressed():
    """the race kept showing the previous run while a new one waited. Run clears it to the empty
    race at once, in the press's one model-free step (never behind the generation, which follows
    it only on success), once the settings passed their check: a refused run leaves the race as
    it was."""
    import app
    import gradio as gr

    from specviz.ui.serve.fields import NAMES
    from specviz.ui.tabs import run_tab

    ids = {block.elem_id: block._id for block in app.demo.blocks.values() if getattr(block, "elem_id", None)}
    pressed = [fn for fn in app.demo.fns.values()
               if (ids["sv-run-btn"], "click") in {(getattr(b, "_id", b), e) for b, e in fn.targets}
               and fn.trigger_after is None]
    first = [fn for fn in pressed if ids["sv-race"] in [b._id for b in fn.outputs]]
    assert len(first) == 1 and first[0].concurrency_id != "generation"
    then = [fn for fn in app.demo.fns.values() if fn.trigger_after == first[0]._id]
    assert [fn.concurrency_id for fn in then] == ["generation"] and then[0].trigger_only_on_success
    outputs = [b._id for b in first[0].outputs]
    race_at = outputs.index(ids["sv-race"])

    request = gr.Request()
    values = {name: block.value for name, block in zip(NAMES, first[0].inputs)}
    answer = first[0].fn(request, *values.values())
    assert answer[race_at].to_plotly_json() == run_tab.empty_race().to_plotly_json()
    assert run_tab.empty_race().to_plotly_json() == race.race_figure(race.race_lanes([], None)).to_plotly_json()
    with pytest.raises(gr.Error):  # a refused setting: nothing answered, so the race stays
        first[0].fn(request, *{**values, "k": 0}.values())


def _plain_lane_over_speculative(fig) -> float:
    finish = next(tr for tr in fig.data if tr.name == "finish")
    by_lane = dict(zip(finish.customdata, finish.x))  # each finish marker names its lane
    return by_lane["plain decoding"] / by_lane["speculative"]


@pytest.mark.parametrize("baseline", [
    PlainBaseline(60.0, 15.0, sample_ms_per_token=(62.0, 58.0, 71.0), sample_tokens=(96, 32, 32), prefill_ms=410.0),
    PlainBaseline(60.0, 15.0),  # a baseline from a rate alone
])
def test_the_race_and_the_headline_count_the_prefill_alike_and_agree(baseline):
    """The race (2.25×) and the headline (1.89×) disagreed because one counted the prefill: both
    now come from :func:`specviz.figures.speedup.race_clock` / :meth:`PlainBaseline.plain_clock`, so on a
    real bundled run the race's plain finish ÷ speculative finish is the headline's speedup, for
    the whole run and for the run up to a pass."""
    import json
    from pathlib import Path

    from specviz.ui.tabs import replay
    from specviz.ui.serve.state import RunState

    data = json.loads((Path(__file__).resolve().parents[1] / "specviz" / "data" / "traces" / "poem_int8.json")
                      .read_text(encoding="utf-8"))
    state = RunState.from_trace(data)
    state.baseline = baseline
    for upto in (None, 6):
        headline = state.analysis(upto).speedup
        assert headline is not None and headline > 0
        assert _plain_lane_over_speculative(replay.race_view(state, None, None, upto)) == pytest.approx(headline,
                                                                                                      rel=1e-9)
    start, plain_start, per_token = race_clock(state.rounds, state.prefill_ms, baseline)
    assert start == pytest.approx(state.rounds[-1].elapsed_s * 1e3 - sum(
        r.draft_ms + r.verify_ms + r.other_ms for r in state.rounds)) and start > 0  # the prefill is in the lane
    assert (plain_start, per_token) == baseline.plain_clock()
