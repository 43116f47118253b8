"""The "Watch a pass" tab: one verify pass of a real run in slow motion, beat by beat (Space / → / ←,
buttons or the scrubber), a guess scored before the reveal, and the accept/resample rule replayed
at the position under the cursor. It reads traces (the bundled ones in ``specviz/data/traces/``, or the
visitor's last run or loaded trace from the Run tab), never a model, so it works in public mode on
a CPU. The beats and the scoring live in :mod:`specviz.ui.teach.beats`, the figures in
:mod:`specviz.ui.draw.beat_charts`, the stage's HTML in :mod:`specviz.ui.draw.watch_views` and its keys'
script in ``specviz/ui/draw/js/stage.js``.

:func:`open_trace` opens a bundled trace at a pass and a beat; ``ctx.watch`` holds it with its
outputs for a URL router.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from specviz.run.request import to_int
from specviz.diagnose.rule_replay import replay_rule
from specviz.core.rules import RULE_CHOICES
from specviz.figures.trace import trace_from_dict
from specviz.core.records import Round
from specviz.ui.context import PageContext
from specviz.ui.draw import beat_charts, watch_views
from specviz.ui.draw.rule_table import rule_replay_text
from specviz.ui.draw.escape import as_text
from specviz.ui.draw.scripts import script
from specviz.ui.share import copy_link
from specviz.ui.serve.state import RunState
from specviz.ui.teach import link_query
from specviz.ui.teach.beats import (
    RESIDUAL,
    TEST,
    Beat,
    beats,
    most_different_position,
    position_distributions,
    quoted,
    score_guess,
    simulate_draws,
    total_variation,
)
from specviz.ui.serve.user_errors import refused, user_errors

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
#: Bundled traces: file stem → the name the dropdown shows (see specviz/data/traces/README.md).
BUNDLED = {
    "poem_int8": "A poem at T = 1, int8 self-draft (real draft distributions)",
    "early_exit_rejection": "Rejections with a wide residual (T = 1, early-exit draft)",
    "copy_lookup": "Copy-heavy prompt, prompt lookup, T = 0",
    "tree_lookup_t0": "Tree rounds, prompt lookup, T = 0 (siblings tested in order)",
    "tree_lookup_t1": "Tree rounds, prompt lookup, T = 1 (siblings against the residual)",
    "pair_code": "Code at T = 0.7, a same-family draft model (Qwen2.5-Coder 0.5B → 1.5B)",
}
LAST_RUN = "Your last run or loaded trace (Run tab)"
DEFAULT = "poem_int8"
DRAWS = 4000
FREE = {"concurrency_limit": None, "show_progress": "hidden", "api_name": False}

#: The stage's script (``js_on_load``, ``draw/js/stage.js``): Space / → step forward, ← back, and the
#: plot's text alternative is the beat's sentence.
STAGE_JS = script("stage")


@dataclass
class Watched:
    """The run being watched (kept in a ``gr.State``): its label and rounds."""

    label: str = ""
    rounds: list[Round] = field(default_factory=list)


@functools.cache
def _bundled_data(stem: str) -> dict:
    return json.loads((TRACES / f"{stem}.json").read_text(encoding="utf-8"))


def bundled(name: str) -> Watched:
    """A bundled trace by file stem or by its dropdown name.

    Raises:
        ValueError: for a name that is not a bundled trace (the message lists them).
    """
    stem = next((s for s, label in BUNDLED.items() if name in (s, label)), None)
    if stem is None:
        raise ValueError(f"no bundled trace {name!r}; choose one of: {', '.join(BUNDLED)}")
    rounds, _ = trace_from_dict(_bundled_data(stem))
    return Watched(BUNDLED[stem], rounds)


# --------------------------------------------------------------------------- page-only views
def stage_html(w: Watched, pass_index: int, beat_index: int, still: bool) -> str:
    """The stage of ``w`` at a pass and a beat (:func:`specviz.ui.draw.watch_views.stage_html`)."""
    return watch_views.stage_html(w.label, w.rounds, pass_index, beat_index, still)


def _cursor_node(round_: Round, beat: Beat) -> int | None:
    """The drafted node under the cursor: the beat's own, the first for the verify beat, the
    rejected one for a resample; None when the pass drafted nothing."""
    if beat.node is not None:
        return beat.node
    if beat.kind == "residual":
        drafted = round_.drafted_for(len(round_.emitted) - 1)
        return round_.drafted.index(drafted) if drafted is not None else None
    return 0 if round_.drafted else None


#: Total variation between p_draft and p_target under which a position has next to no residual to
#: show: the losslessness view moves to the pass's most different position instead.
NEAR_SAME = 0.02


def _position_tv(round_: Round, node: int | None) -> float:
    token = None if node is None else round_.drafted[node]
    if token is None or not token.top_target or not token.top_draft:
        return 0.0
    return total_variation(*position_distributions(token).arrays())


def _lossless_node(round_: Round, beat: Beat) -> int | None:
    """The position the losslessness view shows: the one a test or a resample acts on at its
    beat, unless p_draft ≈ p_target there (total variation under :data:`NEAR_SAME`) and another
    position of the pass differs more; at any other beat (the drafts, the verify pass, a bonus) the
    pass's position where p_draft and p_target differ most, so the view does not open on a bar
    with no residual to see."""
    best = most_different_position(round_)
    if beat.kind in (TEST, RESIDUAL):
        node = _cursor_node(round_, beat)
        if _position_tv(round_, node) >= NEAR_SAME or _position_tv(round_, best) <= _position_tv(round_, node):
            return node
    return best


def _lossless_views(round_: Round, beat: Beat):
    """The stacked bar at :func:`_lossless_node`'s position and its text (an empty figure when
    nothing was drafted)."""
    node = _lossless_node(round_, beat)
    if node is None or not round_.drafted[node].top_target:
        return (beat_charts.empty_figure("nothing drafted at this pass"),
                "Nothing was drafted in this pass (or its distributions were not recorded): no position to check.")
    t = round_.drafted[node]
    dists = position_distributions(t)
    tv = total_variation(*dists.arrays())
    own = beat.kind in (TEST, RESIDUAL) and node == _cursor_node(round_, beat)
    why = ("the position this beat decides" if own else
           f"this pass's position where p_draft and p_target differ most, total variation {tv:.3f}; "
           + ("at the position this beat decides the two are almost the same, so its residual is nearly empty"
              if beat.kind in (TEST, RESIDUAL) else "a test beat shows its own position"))
    if tv < NEAR_SAME:
        why += (f". Here p_draft ≈ p_target (total variation {tv:.3f}): the residual max(0, p_target − p_draft) "
                "is nearly empty and the draft is nearly always kept; a pass with a rejection shows the split")
    text = (f"**Position of {as_text(quoted(t.text))}** (draft {node + 1}; {why}): each bar is p_target, "
            f"split into min(p_draft, p_target), what an accepted draft contributes, and max(0, p_target − p_draft), "
            f"what a rejection's resample contributes. The trace records each distribution's 10 most likely tokens; the "
            f"rest of each side is the **other tokens** bucket ({dists.other_target:.4f} of p_target, "
            f"{dists.other_draft:.4f} of p_draft). Press **Draw** to run the rule many times here.")
    title = f"Draft {node + 1} {quoted(t.text)}: accepted mass + residual mass = p_target"
    return beat_charts.stack_figure(dists, title), text


def _beat_views(w: Watched, pass_index: int, beat_index: int, still: bool):
    """Scrubber, stage, beat figure, stacked bar and its text for one beat (clamped to the pass)."""
    round_ = w.rounds[pass_index]
    all_beats = beats(round_)
    beat_index = min(max(beat_index, 0), len(all_beats) - 1)
    label = f"Pass {pass_index + 1} · "
    stack, stack_text = _lossless_views(round_, all_beats[beat_index])
    return (gr.update(maximum=len(all_beats), value=beat_index + 1),
            stage_html(w, pass_index, beat_index, still),
            beat_charts.beat_figure(round_, all_beats[: beat_index + 1], label), stack, stack_text)


def _pass_views(w: Watched, pass_index: int, beat_index: int, still: bool, rule: str = "full"):
    """:func:`_beat_views`, the guess controls reset for this pass's drafts, and the pass's test
    replayed under ``rule`` (:func:`rule_replay_views`).

    Every view of the shown pass comes from this one call, so none can show another pass: a replay
    chained after the pass's event (``.then``) read the pass slider again, and an event that
    landed in between (a trace loaded while a pass number was typed) had moved it."""
    round_ = w.rounds[pass_index]
    choices = [(label, str(i)) for i, label in enumerate(beat_charts.node_labels(round_))]  # text, not markup
    return (*_beat_views(w, pass_index, beat_index, still),
            gr.update(choices=choices, value=[], interactive=bool(choices)), gr.update(value=0),
            "Guess before the tests play: tick the drafts you expect to be accepted, say how many tokens the pass "
            "will emit, and lock it in." if choices else "Nothing drafted in this pass: nothing to guess.",
            *rule_replay_views(w, pass_index + 1, rule))


def _beat_index(beat_no) -> int:
    """The 0-based beat under a 1-based beat number (the scrubber's and the link's, as the stage
    counts them: "beat 1 of 8"); empty means the first."""
    return int(beat_no or 1) - 1


def _index(w: Watched, pass_no) -> int:
    if not isinstance(w, Watched) or not w.rounds:
        raise refused("Choose a trace first.")
    with user_errors():
        return to_int("pass", pass_no, 1, len(w.rounds)) - 1


def _first_pass(w: Watched) -> int:
    """A pass worth watching first: the first with an accepted draft and at least two tests."""
    for i, r in enumerate(w.rounds):
        if r.n_accepted and sum(t.tested for t in r.drafted) >= 2:
            return i
    return 0


# --------------------------------------------------------------------------- the pass under each rule
def rule_replay_views(w: Watched, pass_no, rule: str):
    """The shown pass's test replayed under ``rule`` with the recorded u
    (:func:`specviz.diagnose.rule_replay.replay_rule`): its words
    (:func:`specviz.ui.draw.rule_table.rule_replay_text`) and its beat drawing."""
    i = _index(w, pass_no)
    round_ = w.rounds[i]
    if not round_.drafted:
        return (f"Pass {i + 1} drafted nothing: no test to replay.", beat_charts.empty_figure("nothing drafted"))
    try:
        replay = replay_rule(round_, rule)
    except ValueError as error:  # a tree pass, a pass without distributions: say so, keep the page
        return f"Pass {i + 1}: {as_text(str(error))}.", beat_charts.empty_figure("no replay for this pass")
    figure = beat_charts.rule_figure(round_, replay, f"Pass {i + 1} under {rule} · ")
    return rule_replay_text(i, round_, replay), figure


# --------------------------------------------------------------------------- callbacks
def _watched(source: str, run_state) -> Watched:
    if source == LAST_RUN:
        if not isinstance(run_state, RunState) or not run_state.rounds:
            raise refused("Nothing run yet: run something in the Run tab (or load a saved trace there), "
                           "or pick a bundled trace.")
        return Watched(run_state.label, list(run_state.rounds))
    with user_errors():
        return bundled(source)


def load(source: str, run_state, still: bool, rule: str = "full"):
    """A trace chosen: keep it and show its first pass worth watching, at its first beat (its
    replay under ``rule``)."""
    w = _watched(source, run_state)
    p = _first_pass(w)
    return (w, gr.update(maximum=max(len(w.rounds), 2), value=p + 1), *_pass_views(w, p, 0, still, rule))


def on_pass(w: Watched, pass_no, still: bool, rule: str = "full"):
    """The pass slider moved: that pass at its first beat, guesses reset, its replay under ``rule``."""
    return _pass_views(w, _index(w, pass_no), 0, bool(still), rule)


def on_beat(w: Watched, pass_no, beat_no, still: bool):
    """The scrubber (or the reduced-motion box) moved: that beat of the current pass."""
    return _beat_views(w, _index(w, pass_no), _beat_index(beat_no), bool(still))


def step(w: Watched, pass_no, beat_no, still: bool, rule: str = "full", *, delta: int):
    """One beat forward or back; past a pass's last beat, the next pass's first (and back), with
    its replay under ``rule``; within a pass the replay stays (it is the pass's, not the beat's)."""
    i = _index(w, pass_no)
    b = _beat_index(beat_no) + delta
    n = len(beats(w.rounds[i]))
    if b >= n and i + 1 < len(w.rounds):
        return (gr.update(value=i + 2), *_pass_views(w, i + 1, 0, bool(still), rule))
    if b < 0 and i > 0:
        return (gr.update(value=i), *_pass_views(w, i - 1, len(beats(w.rounds[i - 1])) - 1, bool(still), rule))
    return (gr.skip(), *_beat_views(w, i, b, bool(still)), *(gr.skip(),) * 5)


def new_score() -> dict:
    """A visitor's running score: expected points, the best possible, items and passes scored."""
    return {"points": 0.0, "best": 0.0, "possible": 0, "passes": 0, "scored": []}


def lock_guess(w: Watched, pass_no, beat_no, picks, count, score: dict, still: bool):
    """Score the guess against the pass's real acceptance probabilities (before the tests have
    played), add it to the running score, and jump to the first test to watch the reveal."""
    i = _index(w, pass_no)
    round_ = w.rounds[i]
    all_beats = beats(round_)
    first = next(k for k, b in enumerate(all_beats) if b.reveals)
    key = f"{w.label}#{i}"
    skip = (gr.skip(),) * 5
    if not round_.drafted:
        return "Nothing drafted in this pass: nothing to guess.", score, *skip
    if key in score["scored"]:
        return f"Pass {i + 1} is already scored; pick another pass.", score, *skip
    if _beat_index(beat_no) >= first:
        return (f"The decisions of pass {i + 1} are already showing: go back to its verify beat (beat {first}) "
                "or pick another pass, then guess.", score, *skip)
    with user_errors():
        guess = None if count in (None, "") else to_int("tokens emitted", count, 0, 10_000) or None
    result = score_guess(round_, {int(p): True for p in picks or []}, guess)
    score = {"points": score["points"] + result.points, "best": score["best"] + result.best,
             "possible": score["possible"] + result.possible, "passes": score["passes"] + 1,
             "scored": [*score["scored"], key]}
    lines = "\n".join(f"- {as_text(line)}" for line in result.lines)
    text = (f"**Pass {i + 1}: {result.points:.2f} expected points out of {result.possible}** (the best guess "
            f"would have earned {result.best:.2f}). A guess earns the probability that it is right: "
            f"min(1, p_target/p_draft) for *accept*, 1 − that for *reject*.\n\n{lines}\n\n"
            f"**Running score**: {score['points']:.2f} of {score['possible']} over {score['passes']} pass(es) "
            f"(best possible {score['best']:.2f}). Now watch the tests play.")
    return text, score, *_beat_views(w, i, first, bool(still))


def draw(w: Watched, pass_no, beat_no, n_draws):
    """Simulate the accept/resample rule (and the accept-every-draft control) at the position the
    losslessness view shows (:func:`_lossless_node`)."""
    i = _index(w, pass_no)
    round_ = w.rounds[i]
    all_beats = beats(round_)
    node = _lossless_node(round_, all_beats[min(max(_beat_index(beat_no), 0), len(all_beats) - 1)])
    if node is None or not round_.drafted[node].top_target:
        raise refused("No drafted position here to draw at: pick a pass that drafted something.")
    with user_errors():
        n = to_int("draws", n_draws, 1, 100_000)
        dists = position_distributions(round_.drafted[node])
    speculative, control = simulate_draws(dists, n, seed=None)
    return beat_charts.draws_figure(dists, speculative, control)


def open_trace(name: str, pass_: int, beat: int):
    """A bundled trace opened at pass ``pass_`` (1-based) and beat ``beat`` (1-based as the stage
    counts it, clamped to the pass): the values of ``ctx.watch[1]``'s outputs (source, state, pass
    slider, the pass's views with its replay under the full rule, then the rule switch back on the
    full rule), for a deep link such as ``?trace=poem_int8&pass=2&beat=5``.

    Raises:
        gr.Error: for an unknown trace or a pass outside the trace (one sentence).
    """
    with user_errors():
        w = bundled(name)
    i = _index(w, pass_)
    return (gr.update(value=w.label), w, gr.update(maximum=max(len(w.rounds), 2), value=i + 1),
            *_pass_views(w, i, _beat_index(beat), False, "full"), gr.update(value="full"))


def watch_query(source: str, pass_: int, beat: int) -> str:
    """The link's query for the bundled trace on screen at this pass and beat
    (:func:`specviz.ui.teach.link_query.watch_link`); a visitor's own run has no link (it lives in their session)."""
    stem = next((s for s, label in BUNDLED.items() if source in (s, label)), None)
    if stem is None:
        return "Only a bundled trace has a link: your own run lives in your session. Export it to share it."
    return link_query.watch_link(stem, int(pass_ or 1), int(beat or 1))


# --------------------------------------------------------------------------- the tab
INTRO = ("Watch **one verify pass** decide, beat by beat, from a real run's trace: the drafts appear, one target "
         "pass scores them all, each test draws its recorded u against min(1, p_target/p_draft), and the pass ends "
         "with a resample from the residual or a bonus token. Step with the **beat ▶** and **◀ beat** buttons or "
         "the scrubber (on a keyboard also **Space** or **→**, back **←**): a phone has no keys to press. Guess first, then watch. **The same pass under another rule** replays its test "
         "under one-hot, exact match, block verification or a lossy control, with the same recorded u.")


def build(ctx: PageContext) -> None:
    """The tab's components and events; sets ``ctx.watch`` to ``(open_trace, its outputs)``."""
    w0 = bundled(DEFAULT)
    p0 = _first_pass(w0)
    views = _pass_views(w0, p0, 0, False)
    gr.Markdown(INTRO)
    with gr.Row():
        source = gr.Dropdown([*BUNDLED.values(), LAST_RUN], value=w0.label, label="Trace", scale=3,
                             elem_id="sv-watch-source")
        load_btn = gr.Button("Load", scale=0, min_width=80, elem_id="sv-watch-load")
        still = gr.Checkbox(False, label="Reduced motion", scale=1, elem_id="sv-watch-still")
    pass_slider = gr.Slider(1, max(len(w0.rounds), 2), value=p0 + 1, step=1, label="Pass", elem_id="sv-watch-pass")
    with gr.Row():
        back = gr.Button("◀ beat", size="sm", min_width=80, elem_id="sv-watch-back")
        # 1-based, as the stage counts beats ("beat 1 of 8"); the callbacks read it through _beat_index.
        beat_slider = gr.Slider(1, views[0]["maximum"], value=1, step=1, label="Beat", elem_id="sv-watch-beat")
        nxt = gr.Button("beat ▶", size="sm", min_width=80, elem_id="sv-watch-next")
    stage = gr.HTML(views[1], js_on_load=STAGE_JS, elem_id="sv-watch-stage")
    plot = gr.Plot(views[2], show_label=False, elem_id="sv-watch-plot")
    with gr.Accordion("Predict, then reveal", open=True):
        with gr.Row():
            picks = gr.CheckboxGroup(views[5]["choices"], label="Drafts you expect to be accepted (unticked: rejected)",
                                     scale=3, elem_id="sv-watch-picks")
            count = gr.Number(0, precision=0, minimum=0, label="Tokens this pass will emit (0: no guess)", scale=1,
                              elem_id="sv-watch-count")
            lock = gr.Button("Lock in my guess", scale=0, min_width=140, elem_id="sv-watch-lock")
        score_md = gr.Markdown(views[7], elem_id="sv-watch-score")
    with gr.Accordion("Losslessness at this position", open=False):
        stack = gr.Plot(views[3], show_label=False, elem_id="sv-watch-stack")
        stack_md = gr.Markdown(views[4], elem_id="sv-watch-stack-text")
        with gr.Row():
            n_draws = gr.Slider(100, 20000, value=DRAWS, step=100, label="Draws", elem_id="sv-watch-draws-n")
            draw_btn = gr.Button("Draw", elem_id="sv-watch-draw")
        draws_plot = gr.Plot(show_label=False, elem_id="sv-watch-draws")
    with gr.Accordion("The same pass under another rule", open=False):
        rule = gr.Radio(list(RULE_CHOICES), value="full", label="Verification rule (replays this pass's test with its "
                        "recorded u)", elem_id="sv-watch-rule")
        rule_md = gr.Markdown(views[8], elem_id="sv-watch-rule-text")
        rule_plot = gr.Plot(views[9], show_label=False, elem_id="sv-watch-rule-plot")
    state, score = gr.State(w0), gr.State(new_score())
    beat_out = [beat_slider, stage, plot, stack, stack_md]
    # Every view of the pass, its replay under the chosen rule included, comes from the one event
    # that moves to the pass (_pass_views): a closed accordion's views too, so they show that pass
    # when opened.
    pass_out = beat_out + [picks, count, score_md, rule_md, rule_plot]
    run_state = ctx.run_state if ctx.run_state is not None else gr.State(None)
    # The menu's select, not its input: input fired twice for one choice (seen in Chromium), and the
    # second load, landing late on a busy machine, moved a visitor who had typed pass 13 back to
    # the trace's first pass (a CI run of the rule-switch test); unordered, a second firing for the
    # previous trace had landed after the next trace's load. always_last: one load at a time, the
    # newest choice last.
    for event in (source.select, load_btn.click):
        event(load, [source, run_state, still, rule], [state, pass_slider, *pass_out], trigger_mode="always_last",
              **FREE)
    rule.change(rule_replay_views, [state, pass_slider, rule], [rule_md, rule_plot], trigger_mode="always_last",
                **FREE)
    # .input: the visitor's drags and typed numbers, not this tab's own updates (a step to the next
    # pass sets the pass slider, which must not reset the beat); always_last skips a drag's middle.
    pass_slider.input(on_pass, [state, pass_slider, still, rule], pass_out, trigger_mode="always_last", **FREE)
    beat_slider.input(on_beat, [state, pass_slider, beat_slider, still], beat_out, trigger_mode="always_last",
                      **FREE)
    still.input(on_beat, [state, pass_slider, beat_slider, still], beat_out, **FREE)
    for button, delta in ((back, -1), (nxt, 1)):
        button.click(functools.partial(step, delta=delta), [state, pass_slider, beat_slider, still, rule],
                     [pass_slider, *pass_out], **FREE)
    lock.click(lock_guess, [state, pass_slider, beat_slider, picks, count, score, still],
               [score_md, score, *beat_out], **FREE)
    draw_btn.click(draw, [state, pass_slider, beat_slider, n_draws], draws_plot, **FREE)
    copy_link("Copy link", "sv-watch-copy", watch_query, [source, pass_slider, beat_slider])
    ctx.watch = (open_trace, [source, state, pass_slider, *pass_out, rule])
